"""A run waiting for a person, with real worker processes: it holds none of them,
survives all of them dying, and a decision wakes it without the sweeper."""

from __future__ import annotations

from collections import Counter

import pytest

from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Approval, Run
from durableruns.services import approvals
from tests.conftest import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

BIG_REFUND = {"order_id": "A-1002"}  # 250.00: above the approval threshold


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _awaiting(run_id: str) -> Approval | None:
    if _status(run_id) != Run.Status.AWAITING_APPROVAL:
        return None
    return Approval.objects.select_related("run").filter(run_id=run_id).first()


def _executions(run_id: str) -> Counter:
    rows = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run_id}:", outcome=ProviderCall.Outcome.EXECUTED
    )
    return Counter(rows.values_list("provider", flat=True))


def test_it_survives_killing_and_restarting_every_worker_while_awaiting(processes, alice):
    workers = [processes.worker(), processes.worker()]
    processes.beat()
    run, _ = start_run("refund-bot", BIG_REFUND, run_id="waiting")
    approval = wait_for(lambda: _awaiting(run.id), message="the run to await approval")
    held = Run.objects.get(pk=run.id)
    assert (held.lease_owner, held.lease_expires_at) == ("", None)

    for worker in workers:
        processes.kill(worker)
    approvals.decide(approval, "approve", user=alice)  # the doorbell waits in Redis
    processes.worker()

    wait_for(lambda: _status(run.id) in Run.TERMINAL, message="the run to finish")
    finished = Run.objects.get(pk=run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert finished.result["cents"] == 25_000
    assert _executions(run.id) == {"payments": 1, "email": 1}
    plans = ModelCall.objects.filter(idempotency_key__startswith=f"{run.id}:", step="plan")
    assert plans.count() == 1  # the plan was replayed, never regenerated


def test_it_wakes_on_a_decision_without_the_sweeper(processes, alice):
    processes.worker()  # and no beat: nothing sweeps
    run, _ = start_run("refund-bot", BIG_REFUND, run_id="woken")
    approval = wait_for(lambda: _awaiting(run.id), message="the run to await approval")
    approvals.decide(approval, "reject", user=alice, comment="customer kept the bike")
    wait_for(lambda: _status(run.id) in Run.TERMINAL, timeout=20, message="the run to finish")
    finished = Run.objects.get(pk=run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert finished.result == {
        "refunded": False,
        "reason": "customer kept the bike",
        "decided_by": "alice",
    }
    assert _executions(run.id) == {}
