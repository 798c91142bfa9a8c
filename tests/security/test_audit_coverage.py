"""Every state-changing URL a person uses records who did what in the audit log.

Built from the same URL list as the role matrix: a new POST URL must get a row in
ACTIONS (its valid request and expected audit action) or be listed as exempt."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from durableruns.engine import vault
from durableruns.models import (
    Approval,
    AuditEvent,
    Effect,
    RedactionRule,
    RetentionPolicy,
    Run,
    Step,
)
from tests.security.test_url_matrix import EXPECTED, KNOWN

pytestmark = pytest.mark.django_db

POLICY = {
    "name": "p2",
    "agent": "",
    "statuses": ["failed"],
    "age_days": "30",
    "action": "delete",
    "enabled": "on",
    "confirm": "save",
}
# name -> (url kwargs, valid form data, expected audit action)
ACTIONS = {
    "policy-create": ({}, POLICY, "policy.create"),
    "policy-update": ({"pk": "policy"}, POLICY, "policy.update"),
    "policy-delete": ({"pk": "policy"}, {}, "policy.delete"),
    "policies-apply": ({}, {"dry_run": "1"}, "retention.apply"),
    "redaction-rule-create": ({}, {"kind": "key", "value": "ssn"}, "redaction_rule.create"),
    "redaction-rule-delete": ({"pk": "rule"}, {}, "redaction_rule.delete"),
    "run-hold": ({"run_id": "free"}, {"reason": "case 7"}, "run.legal_hold"),
    "claim_approval": ({"pk": "approval"}, {}, "approval.claim"),
    "run-release": ({"run_id": "held"}, {}, "run.legal_hold_clear"),
    "run-cancel": ({"run_id": "live"}, {"reason": "audit test"}, "run.cancel"),
    "run-resume": ({"run_id": "failed"}, {}, "run.resume"),
    "decide_approval": ({"pk": "approval"}, {"decision": "approve"}, "approval.approve"),
    "escalation-resolve": (
        {"effect_id": "effect"},
        {"resolution": "not_happened"},
        "effect.resolve",
    ),
    "secret-reveal": (
        {"run_id": "free", "kind": "run", "pk": "free", "field": "input"},
        {"reason": "the customer asked"},
        "secret.reveal",
    ),
}
# Answered with the page itself, not a redirect: a revealed value is kept nowhere
# that a later GET could read it from.
ANSWERED_IN_PLACE = {"secret-reveal"}
# The JSON API: the same actions for scripts, answered with JSON, not a redirect.
API_ACTIONS = {
    "api-run-cancel": ({"run_id": "live"}, {"reason": "audit test"}, "run.cancel", 200),
    "api-run-resume": ({"run_id": "failed"}, {}, "run.resume", 200),
    "api-run-fork": ({"run_id": "free"}, {"position": 0}, "run.fork", 201),
    "api-approval-decide": (
        {"approval_id": "approval"},
        {"decision": "reject", "comment": "not today"},
        "approval.reject",
        200,
    ),
    "api-effect-resolve": (
        {"effect_id": "effect"},
        {"resolution": "not_happened"},
        "effect.resolve",
        200,
    ),
}
# Not a person's action on the product's data: signing out, and the demo's stand-in
# providers (an HTTP API the demo tools call, which keeps its own ledger).
# redaction-rule-preview changes nothing: it only reads recent runs (a POST because
# it carries the rule being typed, which may be a secret-looking pattern).
EXEMPT = {"logout", "provider-dedupe", "provider-execute", "redaction-rule-preview"}
# The demo's scripted model API: a stand-in provider, recording its calls like the others.
EXEMPT |= {"model-chat-completions", "model-messages"}
# A person's own saved views of the runs page (web/saved_views.py): they change no run
# and nobody else's data, and nobody else sees them; like signing out, not audited.
EXEMPT |= {"run-views-save", "run-view-delete"}
# Audited, but it needs a real LangGraph thread: tests/langgraph/test_pages.py checks it.
EXEMPT |= {"langgraph-fork"}
POST_URLS = [name for name in KNOWN if EXPECTED[name].method == "POST"]


def test_every_state_changing_url_is_audited_or_exempt():
    missing = sorted(set(POST_URLS) - set(ACTIONS) - set(API_ACTIONS) - EXEMPT)
    assert not missing, f"add these to ACTIONS in {__file__}: {missing}"


def _objects() -> dict[str, object]:
    """A run in each state an action needs, plus the rows the actions target."""
    states = {
        "free": Run.Status.SUCCEEDED,
        "held": Run.Status.SUCCEEDED,
        "live": Run.Status.QUEUED,
        "failed": Run.Status.FAILED,
        "escalated": Run.Status.ESCALATED,
        "waiting": Run.Status.AWAITING_APPROVAL,
    }
    for run_id, status in states.items():
        Run.objects.create(
            id=run_id,
            agent="refund-bot",
            agent_version="1",
            input={},
            status=status,
            max_steps=5,
            max_duration_seconds=60,
            legal_hold=run_id == "held",
            secrets=vault.seal({"input": {"api_key": "k-1"}}) if run_id == "free" else "",
        )
    now = timezone.now()
    Step.objects.create(
        run_id="free",
        position=0,
        step_id="0-plan",
        kind="llm",
        name="plan",
        result={"content": "{}", "usage": {}},
        started_at=now,
        finished_at=now,
    )
    effect = Effect.objects.create(
        run_id="escalated",
        position=0,
        idempotency_key="escalated:0-refund:refund:0",
        tool="refund_unsafe",
        tool_kind="unsafe_write",
        fingerprint="0",
        args={},
        state=Effect.State.UNKNOWN,
        started_at=now,
    )
    approval = Approval.objects.create(
        run_id="waiting",
        position=0,
        name="approve-refund",
        payload={"cents": 1},
        allowed=["approve", "reject"],
    )
    return {
        "policy": RetentionPolicy.objects.create(
            name="p", statuses=["failed"], age_days=30, action="delete"
        ).pk,
        "rule": RedactionRule.objects.create(kind="key", value="employee_id").pk,
        "effect": effect.pk,
        "approval": approval.pk,
    }


def _audited(name: str, kwargs: dict, objects: dict) -> str:
    return reverse(name, kwargs={k: objects.get(v, v) for k, v in kwargs.items()})


@pytest.mark.parametrize("name", [n for n in POST_URLS if n in ACTIONS])
def test_it_records_the_action(name, carol):
    objects = _objects()
    kwargs, data, action = ACTIONS[name]
    client = Client()
    client.force_login(carol)
    url = _audited(name, kwargs, objects)
    if data.get("confirm") == "save":  # a policy is saved only with its preview's token
        preview = client.post(url, {**data, "confirm": "preview"}).content.decode()
        token = re.search(r'name="preview_token" value="([^"]+)"', preview).group(1)
        data = {**data, "preview_token": token}
    response = client.post(url, data)
    assert response.status_code == (200 if name in ANSWERED_IN_PLACE else 302)
    event = AuditEvent.objects.get()
    assert (event.actor_name, event.action) == ("carol", action)


@pytest.mark.parametrize("name", [n for n in POST_URLS if n in API_ACTIONS])
def test_the_api_records_the_action(name, carol):
    objects = _objects()
    kwargs, data, action, status = API_ACTIONS[name]
    client = Client()
    client.force_login(carol)
    response = client.post(_audited(name, kwargs, objects), data, content_type="application/json")
    assert response.status_code == status, response.content
    event = AuditEvent.objects.get()
    assert (event.actor_name, event.action) == ("carol", action)
