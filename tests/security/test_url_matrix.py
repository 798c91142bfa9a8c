"""Every URL x every role gets the expected status; every state change is a POST
protected by CSRF; every response carries the Content-Security-Policy.

The URL list comes from the resolver, so a URL added anywhere is covered: a URL
with no row in EXPECTED fails `test_every_url_has_an_expectation` until someone
decides who may use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from durableruns import roles
from durableruns.models import (
    Approval,
    Effect,
    RedactionRule,
    RetentionPolicy,
    Run,
    SavedView,
    Step,
    SweeperBeat,
)

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "norole", "reviewer", "operator", "admin")


@dataclass(frozen=True)
class Expect:
    method: str
    status: dict[str, int]
    kwargs: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    csrf: bool = True  # False only for machine-to-machine endpoints, with a reason


def _by_role(anonymous: int, norole: int, reviewer: int, operator: int, admin: int) -> dict:
    return dict(zip(ROLES, (anonymous, norole, reviewer, operator, admin), strict=True))


VIEW_PAGE = _by_role(302, 403, 200, 200, 200)
ADMIN_PAGE = _by_role(302, 403, 403, 403, 200)
ADMIN_ACTION = _by_role(302, 403, 403, 403, 302)
OPERATOR_ACTION = _by_role(302, 403, 403, 302, 302)
PUBLIC = _by_role(200, 200, 200, 200, 200)
RUN = {"run_id": "r1"}
API_VIEW = _by_role(401, 403, 200, 200, 200)
API_OPERATE = _by_role(401, 403, 403, 415, 415)

EXPECTED: dict[str, Expect] = {
    "runs": Expect("GET", VIEW_PAGE),
    "run": Expect("GET", VIEW_PAGE, RUN),
    # The start form (GET) posts to itself: operators and admins.
    "run-start": Expect("GET", _by_role(302, 403, 403, 200, 200)),
    "login": Expect("GET", PUBLIC),
    "logout": Expect("POST", _by_role(302, 302, 302, 302, 302)),
    "healthz": Expect("GET", PUBLIC),
    # The icon's old-style address, asked for before anyone logs in: to the static file.
    "favicon": Expect("GET", _by_role(301, 301, 301, 301, 301)),
    # Guarded by a bearer token, not a session: no token, no metrics, whoever asks.
    "metrics": Expect("GET", _by_role(401, 401, 401, 401, 401)),
    "policies": Expect("GET", ADMIN_PAGE),
    "policy": Expect("GET", ADMIN_PAGE, {"pk": "policy"}),
    # An empty form is refused (400) once the permission check has let the admin in.
    "policy-create": Expect("POST", _by_role(302, 403, 403, 403, 400)),
    "policy-update": Expect("POST", _by_role(302, 403, 403, 403, 400), {"pk": "policy"}),
    "policy-delete": Expect("POST", ADMIN_ACTION, {"pk": "policy"}),
    "policies-apply": Expect("POST", ADMIN_ACTION, data={"dry_run": "1"}),
    "redaction-rules": Expect("GET", ADMIN_PAGE),
    "redaction-rule-create": Expect("POST", _by_role(302, 403, 403, 403, 400)),
    "redaction-rule-delete": Expect("POST", ADMIN_ACTION, {"pk": "rule"}),
    # Destructive admin actions: a confirmation page first (GET), then the POST.
    "policies-apply-confirm": Expect("GET", ADMIN_PAGE),
    "policy-delete-confirm": Expect("GET", ADMIN_PAGE, {"pk": "policy"}),
    "held-runs": Expect("GET", ADMIN_PAGE),
    "audit-log": Expect("GET", ADMIN_PAGE),
    # An empty rule form is refused (400) once the permission check has let one in.
    "redaction-rule-preview": Expect("POST", _by_role(302, 403, 403, 403, 400)),
    # The admin pages moved to /manage/: old links redirect (after logging in).
    "admin-moved": Expect("GET", _by_role(302, 301, 301, 301, 301), {"rest": "policies/"}),
    # Where logging in lands: a redirect to the inbox or the runs, for everyone.
    "home": Expect("GET", _by_role(302, 302, 302, 302, 302)),
    "run-hold": Expect("POST", OPERATOR_ACTION, RUN),
    "run-release": Expect("POST", ADMIN_ACTION, RUN),
    # Sealed secrets: admins only; a reveal without a reason is refused (400).
    "run-secrets": Expect("GET", ADMIN_PAGE, RUN),
    "secret-reveal": Expect(
        "POST",
        _by_role(302, 403, 403, 403, 400),
        {"run_id": "r1", "kind": "run", "pk": "r1", "field": "input"},
    ),
    # Reviewers' inbox: every role may read it; deciding needs decide_approval (an
    # empty form is refused with 400 once the permission check has let one in).
    "approvals": Expect("GET", VIEW_PAGE),
    "approval": Expect("GET", VIEW_PAGE, {"pk": "approval"}),
    "decide_approval": Expect("POST", _by_role(302, 403, 400, 403, 400), {"pk": "approval"}),
    # Claiming takes the approval for oneself (redirect back); operators may not.
    "claim_approval": Expect("POST", _by_role(302, 403, 302, 403, 302), {"pk": "approval"}),
    # Operator dashboard: reading is for every role, acting needs operate_run.
    "run-statuses": Expect("GET", VIEW_PAGE),
    "run-step": Expect("GET", VIEW_PAGE, {"run_id": "r1", "position": 0}),
    "effects": Expect("GET", VIEW_PAGE),
    "escalations": Expect("GET", VIEW_PAGE),
    "run-replay": Expect("GET", _by_role(302, 403, 403, 200, 200), RUN),
    # GET is the fork confirmation page (400 without a position); the POST forks.
    "run-fork": Expect("GET", _by_role(302, 403, 403, 400, 400), RUN),
    "langgraph-fork": Expect("POST", OPERATOR_ACTION, RUN),
    # GET is the bulk confirmation page ("cancel 12 runs?"); nothing selected: back.
    "runs-bulk": Expect("GET", _by_role(302, 403, 403, 302, 302)),
    # Saved views (issue 24): every role that sees the runs keeps its own; a nameless
    # save is refused (400), and another person's view is not found (404) by anyone.
    "run-views-save": Expect("POST", _by_role(302, 403, 400, 400, 400)),
    "run-view-delete": Expect("POST", _by_role(302, 403, 404, 404, 404), {"pk": "view"}),
    # GET is the confirmation asking why; the POST (with a reason) cancels.
    "run-cancel": Expect("GET", _by_role(302, 403, 403, 200, 200), RUN),
    "run-resume": Expect("POST", OPERATOR_ACTION, RUN),
    "escalation-resolve": Expect(
        "POST", _by_role(302, 403, 403, 400, 400), {"effect_id": "effect"}
    ),
    # Asking the provider runs the tool's reconcile hook: operators only.
    "escalation-lookup": Expect("GET", _by_role(302, 403, 403, 200, 200), {"effect_id": "effect"}),
    # JSON API: 401 without credentials; form-encoded bodies are refused with 415
    # once the permission check has let the caller in.
    "api-schema": Expect("GET", PUBLIC),
    # The browsable docs describe the API like the schema, so they are public too.
    "api-docs": Expect("GET", PUBLIC),
    "api-not-found": Expect("GET", _by_role(404, 404, 404, 404, 404)),
    "api-runs": Expect("GET", API_VIEW),
    "api-run": Expect("GET", API_VIEW, RUN),
    "api-run-steps": Expect("GET", API_VIEW, RUN),
    "api-run-effects": Expect("GET", API_VIEW, RUN),
    "api-run-approvals": Expect("GET", API_VIEW, RUN),
    "api-run-audit": Expect("GET", API_VIEW, RUN),
    "api-effects": Expect("GET", API_VIEW),
    "api-effect": Expect("GET", API_VIEW, {"effect_id": "effect"}),
    "api-approvals": Expect("GET", API_VIEW),
    "api-approval": Expect("GET", API_VIEW, {"approval_id": "approval"}),
    "api-run-replay": Expect("GET", _by_role(401, 403, 403, 200, 200), RUN),
    "api-run-fork-preview": Expect("GET", _by_role(401, 403, 403, 400, 400), RUN),
    "api-run-cancel": Expect("POST", API_OPERATE, RUN),
    "api-run-resume": Expect("POST", _by_role(401, 403, 403, 409, 409), RUN),
    "api-run-fork": Expect("POST", API_OPERATE, RUN),
    "api-effect-resolve": Expect("POST", API_OPERATE, {"effect_id": "effect"}),
    "api-approval-decide": Expect(
        "POST", _by_role(401, 403, 415, 403, 415), {"approval_id": "approval"}
    ),
    # The demo's stand-in payment/email providers: an HTTP API for the demo tools,
    # authenticated by nobody (they are local stand-ins), exempt from CSRF.
    "provider-order": Expect("GET", PUBLIC, {"order_id": "A-1001"}),
    # The scripted model (OpenAI- and Anthropic-shaped), for the demo's tool-calling agent.
    "model-chat-completions": Expect("POST", _by_role(400, 400, 400, 400, 400), csrf=False),
    "model-messages": Expect("POST", _by_role(400, 400, 400, 400, 400), csrf=False),
    "provider-search": Expect("GET", PUBLIC),
    "provider-dedupe": Expect(
        "POST", _by_role(400, 400, 400, 400, 400), {"provider": "payments"}, csrf=False
    ),
    "provider-lookup": Expect(
        "GET", _by_role(404, 404, 404, 404, 404), {"provider": "payments", "key": "nope"}
    ),
    "provider-execute": Expect(
        "POST",
        _by_role(400, 400, 400, 400, 400),
        {"provider": "payments", "mode": "none"},
        csrf=False,
    ),
}


def _url_names(patterns: list, namespace: str = "") -> list[str]:
    names = []
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            names += _url_names(entry.url_patterns, inner)
        elif isinstance(entry, URLPattern):
            names.append(f"{namespace}{entry.name}" if entry.name else f"<unnamed {entry.pattern}>")
    return names


ALL_URLS = _url_names(get_resolver().url_patterns)


def test_every_url_has_an_expectation():
    unknown = sorted(set(ALL_URLS) - set(EXPECTED))
    assert not unknown, (
        f"URLs without a row in tests/security/test_url_matrix.py EXPECTED: {unknown}. "
        "Decide who may use each one and add it."
    )


@pytest.fixture
def objects(db):
    SweeperBeat.objects.create(swept_at=timezone.now())  # a live sweeper: /healthz is 200
    Run.objects.create(
        id="r1",
        agent="refund-bot",
        agent_version="1",
        input={},
        status=Run.Status.SUCCEEDED,
        max_steps=5,
        max_duration_seconds=60,
    )
    policy = RetentionPolicy.objects.create(
        name="p", statuses=["failed"], age_days=30, action="delete"
    )
    rule = RedactionRule.objects.create(kind="key", value="employee_id")
    now = timezone.now()
    Step.objects.create(
        run_id="r1",
        position=0,
        step_id="0-x",
        kind="compute",
        name="x",
        started_at=now,
        finished_at=now,
    )
    effect = Effect.objects.create(
        run_id="r1",
        position=1,
        idempotency_key="r1:1-refund:refund:0",
        tool="refund",
        tool_kind="unsafe_write",
        fingerprint="0",
        args={},
        started_at=now,
    )
    approval = Approval.objects.create(run_id="r1", position=2, name="refund", payload={})
    owner = get_user_model().objects.create_user("view-owner")  # nobody who asks below
    view = SavedView.objects.create(owner=owner, name="theirs", query="status=failed")
    return {
        "policy": policy.pk,
        "rule": rule.pk,
        "effect": effect.pk,
        "approval": approval.pk,
        "view": view.pk,
    }


def _client(role: str, django_user_model, **client_kwargs: Any) -> Client:
    client = Client(**client_kwargs)
    if role != "anonymous":
        user = django_user_model.objects.create_user(f"user-{role}")
        if role != "norole":
            roles.grant(user, role)
        client.force_login(user)
    return client


def _url(name: str, objects: dict[str, int]) -> str:
    kwargs = {k: objects.get(v, v) for k, v in EXPECTED[name].kwargs.items()}
    return reverse(name, kwargs=kwargs)


KNOWN = [name for name in ALL_URLS if name in EXPECTED]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", KNOWN)
def test_each_role_gets_the_expected_status(name, role, objects, django_user_model, settings):
    settings.DURABLERUNS_METRICS_TOKEN = "a-metrics-token-for-tests"
    expect = EXPECTED[name]
    client = _client(role, django_user_model)
    send = client.get if expect.method == "GET" else client.post
    response = send(_url(name, objects), expect.data)
    assert response.status_code == expect.status[role], (name, role)
    if response.status_code == 302 and role == "anonymous" and expect.status[role] == 302:
        assert response["Location"].startswith(reverse("login")) or name == "logout"
    policy = response.headers.get("Content-Security-Policy", "")
    assert "default-src 'self'" in policy, (name, role)
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


@pytest.mark.parametrize("name", [n for n in KNOWN if EXPECTED[n].method == "POST"])
def test_state_changes_refuse_get(name, objects, django_user_model):
    response = _client("admin", django_user_model).get(_url(name, objects))
    assert response.status_code == 405


@pytest.mark.parametrize(
    "name", [n for n in KNOWN if EXPECTED[n].method == "POST" and EXPECTED[n].csrf]
)
def test_state_changes_require_a_csrf_token(name, objects, django_user_model):
    client = _client("admin", django_user_model, enforce_csrf_checks=True)
    response = client.post(_url(name, objects), EXPECTED[name].data)
    assert response.status_code == 403
    assert Run.objects.filter(pk="r1", legal_hold=False).exists()
    assert RetentionPolicy.objects.filter(pk=objects["policy"]).exists()
    assert SavedView.objects.filter(pk=objects["view"]).exists()


def test_login_requires_a_csrf_token(carol):
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("login"), {"username": "carol", "password": "carol-password-1"})
    assert response.status_code == 403


def test_forms_on_pages_carry_the_csrf_token(client, carol, objects):
    client.force_login(carol)
    pages = ("policies", "redaction-rules", "runs")
    for url in (*(reverse(name) for name in pages), reverse("run", args=["r1"])):
        body = client.get(url).content.decode()
        assert body.count('method="post"') == body.count('name="csrfmiddlewaretoken"'), url
