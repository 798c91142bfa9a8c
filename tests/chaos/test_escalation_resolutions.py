"""What each resolution of an escalation makes the engine do, with real workers.

A worker is killed (SIGKILL) around an unsafe refund at a provider that can neither
deduplicate nor be looked up, so the run escalates; an operator resolves it, and
the run continues on a real worker against the real stand-in provider.
"""

from __future__ import annotations

import pytest

from durableruns.demo.models import ProviderCall
from durableruns.engine import crashpoints
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from durableruns.services import escalations
from durableruns.services import runs as operations
from durableruns.testing import crashtest
from tests.conftest import TEST_LEASE_TTL, TEST_SWEEP_INTERVAL, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

UNSAFE_REFUND = {"order_id": "A-1001", "payments": "none", "email": "dedupe"}
REFUND_POSITION = 2
MANUAL = {"refund_id": "re_manual_42", "status": "succeeded", "order_id": "A-1001", "cents": 4500}


@pytest.fixture
def cluster(provider_url, tmp_path):
    options = crashtest.Options(
        workers=2, lease_ttl=TEST_LEASE_TTL, sweep_interval=TEST_SWEEP_INTERVAL
    )
    with crashtest.Cluster(options, tmp_path) as running:
        yield running


def _escalated_refund(cluster, point: str) -> Effect:
    run_id = f"escalate-{point}"
    crashpoints.arm(cluster.crash_dir, run_id, point, REFUND_POSITION)
    start_run("refund-bot", UNSAFE_REFUND, run_id=run_id)
    wait_for(lambda: _status(run_id) == Run.Status.ESCALATED, message="the run to escalate")
    return Effect.objects.get(run_id=run_id, position=REFUND_POSITION)


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _refunds(effect: Effect) -> int:
    return ProviderCall.objects.filter(
        provider="payments", outcome="executed", idempotency_key=effect.idempotency_key
    ).count()


def _emails(run_id: str) -> int:
    return ProviderCall.objects.filter(
        provider="email", outcome="executed", idempotency_key__startswith=f"{run_id}:"
    ).count()


def test_it_gives_the_agent_the_result_a_human_says_happened(cluster, bob):
    effect = _escalated_refund(cluster, crashpoints.AFTER_TOOL_RETURNED)
    assert effect.state == Effect.State.UNKNOWN and _refunds(effect) == 1

    escalations.resolve(effect, "happened", user=bob, result=MANUAL, note="seen at the bank")

    wait_for(lambda: _status(effect.run_id) in Run.TERMINAL, message="the run to finish")
    run = Run.objects.get(pk=effect.run_id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result["refund_id"] == "re_manual_42"
    assert _refunds(effect) == 1  # nothing was called again
    assert _emails(run.id) == 1


def test_it_calls_again_with_the_same_key_when_it_did_not_happen(cluster, bob):
    effect = _escalated_refund(cluster, crashpoints.AFTER_EFFECT_STARTED)
    assert _refunds(effect) == 0

    escalations.resolve(effect, "not_happened", user=bob, note="no charge at the bank")

    wait_for(lambda: _status(effect.run_id) in Run.TERMINAL, message="the run to finish")
    run = Run.objects.get(pk=effect.run_id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert _refunds(effect) == 1  # exactly one execution, under the same key
    assert ProviderCall.objects.filter(provider="payments").count() == 1
    effect.refresh_from_db()
    assert (effect.state, effect.attempts) == (Effect.State.SUCCEEDED, 2)


def test_it_cancels_the_run_when_aborted(cluster, bob):
    effect = _escalated_refund(cluster, crashpoints.DURING_RESULT_COMMIT)

    escalations.resolve(effect, "aborted", user=bob, note="the customer withdrew")

    assert _status(effect.run_id) == Run.Status.CANCELLED
    assert _refunds(effect) == 1
    assert _emails(effect.run_id) == 0


def test_it_asks_again_when_a_run_aborted_over_an_unknown_outcome_is_resumed(cluster, bob):
    effect = _escalated_refund(cluster, crashpoints.AFTER_TOOL_RETURNED)
    escalations.resolve(effect, "aborted", user=bob)

    operations.resume(Run.objects.get(pk=effect.run_id), user=bob)

    wait_for(
        lambda: _status(effect.run_id) == Run.Status.ESCALATED,
        message="the resumed run to escalate again",
    )
    effect.refresh_from_db()
    assert effect.state == Effect.State.UNKNOWN
    assert _refunds(effect) == 1  # not called again on a guess
    escalations.resolve(effect, "happened", user=bob, result=MANUAL)
    wait_for(lambda: _status(effect.run_id) == Run.Status.SUCCEEDED, message="the run to finish")
