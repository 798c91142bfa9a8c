"""A resolution that lands while the run is escalating (between the effect's
`unknown` write and the run's `escalated` write) is never lost: whichever commits
second sees the other, and the run continues with what the operator said."""

from __future__ import annotations

import pytest
from django.utils import timezone

from durableruns.demo import tools
from durableruns.demo.models import ProviderCall
from durableruns.engine import store
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from durableruns.services import escalations
from durableruns.services import runs as operations

pytestmark = pytest.mark.django_db(transaction=True)

UNSAFE_REFUND = {"order_id": "A-1001", "payments": "none", "email": "dedupe"}
MANUAL = {"refund_id": "re_manual_7", "status": "succeeded", "order_id": "A-1001", "cents": 4500}


@pytest.fixture
def timeout_once(monkeypatch):
    """The payment provider's answer is lost once (a timeout before it was reached):
    the unsafe refund's outcome is unknown, so the run escalates."""
    real = tools.refund_unsafe.fn
    calls = []

    def refund(*args, **kwargs):
        calls.append(kwargs["idempotency_key"])
        if len(calls) == 1:
            raise TimeoutError("the provider did not answer")
        return real(*args, **kwargs)

    monkeypatch.setattr(tools.refund_unsafe, "fn", refund)


@pytest.fixture
def resolve_between_writes(monkeypatch, bob):
    """The operator's resolution commits after the effect became `unknown` and before
    the executor writes `escalated`: the interleaving that used to strand the run."""
    mark = store.set_effect_state
    answers: dict[str, object] = {}

    def resolved_right_after(lease, key, state, **kwargs):
        mark(lease, key, state, **kwargs)
        if state == Effect.State.UNKNOWN:
            effect = Effect.objects.get(idempotency_key=key)
            assert Run.objects.get(pk=lease.run_id).status == Run.Status.RUNNING
            escalations.resolve(effect, answers["resolution"], user=bob, result=answers["result"])

    monkeypatch.setattr(store, "set_effect_state", resolved_right_after)
    return answers


def _refunds() -> int:
    return ProviderCall.objects.filter(provider="payments", outcome="executed").count()


@pytest.mark.parametrize(
    ("resolution", "result", "status", "refunds"),
    [
        (Effect.Resolution.HAPPENED, MANUAL, Run.Status.SUCCEEDED, 0),
        (Effect.Resolution.NOT_HAPPENED, None, Run.Status.SUCCEEDED, 1),
        (Effect.Resolution.ABORTED, None, Run.Status.CANCELLED, 0),
    ],
)
def test_a_resolution_between_the_two_escalation_writes_continues_the_run(
    drive, provider_url, timeout_once, resolve_between_writes, resolution, result, status, refunds
):
    resolve_between_writes.update(resolution=resolution, result=result)
    start_run("refund-bot", UNSAFE_REFUND, run_id="race")
    run = drive("race")
    assert run.status == status, run.error
    assert _refunds() == refunds
    effect = Effect.objects.get(run_id="race", tool="refund_unsafe")
    assert effect.resolution == resolution
    if resolution == Effect.Resolution.HAPPENED:
        assert effect.result == MANUAL


def _stranded(bob) -> Effect:
    """What the old code left behind: the effect resolved, its run still escalated."""
    run = Run.objects.create(
        id="stuck",
        agent="refund-bot",
        agent_version="1",
        input=UNSAFE_REFUND,
        status=Run.Status.ESCALATED,
        max_steps=20,
        max_duration_seconds=1800,
    )
    effect = Effect.objects.create(
        run=run,
        position=2,
        idempotency_key="stuck:2-refund_unsafe:refund_unsafe:0",
        tool="refund_unsafe",
        tool_kind="unsafe_write",
        fingerprint="0",
        args={},
        state=Effect.State.UNKNOWN,
        started_at=timezone.now(),
    )
    escalations.resolve(effect, Effect.Resolution.NOT_HAPPENED, user=bob)
    Run.objects.filter(pk="stuck").update(status=Run.Status.ESCALATED)
    return effect


def test_repeating_the_resolution_wakes_a_stranded_run(rung, bob):
    effect = _stranded(bob)
    escalations.resolve(effect, Effect.Resolution.NOT_HAPPENED, user=bob)
    assert Run.objects.get(pk="stuck").status == Run.Status.QUEUED
    assert rung[-1] == "stuck"


def test_an_operator_may_resume_an_escalated_run_whose_effects_are_resolved(rung, bob):
    _stranded(bob)
    assert operations.resume(Run.objects.get(pk="stuck"), user=bob)
    assert Run.objects.get(pk="stuck").status == Run.Status.QUEUED


def test_an_escalated_run_with_an_unknown_effect_cannot_be_resumed(rung, bob):
    _stranded(bob)
    Effect.objects.filter(run_id="stuck").update(state=Effect.State.UNKNOWN)
    assert not operations.resume(Run.objects.get(pk="stuck"), user=bob)
    assert Run.objects.get(pk="stuck").status == Run.Status.ESCALATED
