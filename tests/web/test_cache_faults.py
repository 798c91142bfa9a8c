"""Redis is only the doorbell and a cache (invariant 7): when it is unreachable, or a key
holds something this version did not write, pages and decisions still work from
Postgres, never a 500, and nothing a person did is lost."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import reverse

import durableruns as dr
from durableruns import secret_text
from durableruns.engine.runs import start_run
from durableruns.models import Approval, RedactionRule, Run
from tests.web.dashboard import make_run

pytestmark = pytest.mark.django_db

# Nothing listens on port 1: every cache call fails at once with a connection error.
UNREACHABLE = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.2},
    }
}


def _pending(run_id: str, payload: dict) -> Approval:
    run = make_run(run_id, status=Run.Status.AWAITING_APPROVAL)
    return Approval.objects.create(
        run=run,
        position=2,
        name="approve-refund",
        payload=payload,
        allowed=["approve", "reject"],
        guards={"tool": "refund", "args": payload},
    )


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def forgotten_rules():
    """Each test starts and ends with no in-process copy of the redaction rules."""
    secret_text.rules_changed()
    yield
    secret_text.rules_changed()


@pytest.mark.usefixtures("forgotten_rules")
def test_a_decision_is_recorded_and_answered_while_redis_is_unreachable(alice):
    approval = _pending("cache-down", {"order_id": "A-1", "cents": 100})
    with override_settings(CACHES=UNREACHABLE):
        secret_text.rules_changed()  # an earlier test's copy must not hide the outage
        client = _client(alice)
        decided = client.post(
            reverse("decide_approval", args=[approval.pk]), {"decision": "approve"}
        )
        page = client.get(reverse("run", args=["cache-down"]))

    assert decided.status_code == 302, decided.content[:500]
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.APPROVED
    assert page.status_code == 200


IBAN = "GB33BUKB20201555555555"


@dr.agent("t-cache-faults", version="1")
def cache_faults_bot(run: dr.Run, task: dict) -> dict:
    """Stores its input (for the redaction tests)."""
    return task


def _stored_input(run_id: str) -> dict:
    start_run("t-cache-faults", {"iban": IBAN, "order_id": "A-1"}, run_id=run_id)
    return Run.objects.get(pk=run_id).input


@pytest.mark.usefixtures("forgotten_rules")
def test_the_admins_rules_still_redact_while_redis_is_unreachable():
    RedactionRule.objects.create(kind=RedactionRule.Kind.KEY, value="iban")
    with override_settings(CACHES=UNREACHABLE):
        secret_text.rules_changed()
        stored = _stored_input("cache-down-rules")

    assert stored == {"iban": secret_text.REDACTED, "order_id": "A-1"}


@pytest.mark.parametrize(
    "garbage",
    [
        "not a list",
        [["key"]],
        [["key", "iban", "extra"]],
        [[1, 2]],
        {"key": "iban"},
        7,
        {"generation": "current", "rules": "key iban"},
        {"generation": "current", "rules": [["key", "iban", "extra"]]},
    ],
    ids=[
        "text",
        "short pair",
        "long triple",
        "numbers",
        "mapping",
        "number",
        "current generation, text",
        "current generation, triple",
    ],
)
@pytest.mark.usefixtures("forgotten_rules")
def test_a_rules_cache_entry_it_did_not_write_is_ignored(garbage):
    RedactionRule.objects.create(kind=RedactionRule.Kind.KEY, value="iban")
    if isinstance(garbage, dict) and garbage.get("generation") == "current":
        garbage = {**garbage, "generation": cache.get(secret_text.GENERATION_KEY, 0)}
    cache.set(secret_text.CACHE_KEY, garbage, timeout=60)

    stored = _stored_input("cache-garbage")

    assert stored == {"iban": secret_text.REDACTED, "order_id": "A-1"}


def test_a_login_while_redis_is_unreachable_is_refused_with_a_message_not_a_500(alice):
    """The throttle cannot count failures without its store, so it fails closed (an
    attacker who can take Redis down must not get unlimited guesses), and says so."""
    with override_settings(CACHES=UNREACHABLE):
        answer = Client().post(
            reverse("login"), {"username": "alice", "password": "alice-password-1"}
        )

    assert answer.status_code == 503
    assert b"try again" in answer.content.lower()
