"""Invariant 2 against redaction, with real worker processes: under an e-mail rule,
the refund agent e-mails the customer's real address after the approval, also when
the worker is SIGKILLed between the order lookup and the approval (issue 11)."""

from __future__ import annotations

import pytest

from durableruns.demo.models import ProviderCall
from durableruns.engine import crashpoints, redaction
from durableruns.engine.runs import start_run
from durableruns.models import Approval, RedactionRule, Run, Step
from durableruns.services import approvals
from tests.conftest import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+\.[A-Za-z0-9.]+"
LOOKUP = 1  # refund-bot: 0 plan, 1 lookup_order, 2 approve-refund


def _awaiting(run_id: str) -> Approval | None:
    status = Run.objects.values_list("status", flat=True).get(pk=run_id)
    if status != Run.Status.AWAITING_APPROVAL:
        return None
    return Approval.objects.select_related("run").filter(run_id=run_id).first()


def _emails(run_id: str) -> list[str]:
    rows = ProviderCall.objects.filter(
        provider="email",
        idempotency_key__startswith=f"{run_id}:",
        outcome=ProviderCall.Outcome.EXECUTED,
    )
    return [payload["to"] for payload in rows.values_list("payload", flat=True)]


def _approve_and_finish(run_id: str, alice) -> Run:
    approval = wait_for(lambda: _awaiting(run_id), message="the run to await approval")
    assert "grace@example.com" not in str(approval.payload)
    approvals.decide(approval, "approve", user=alice)
    wait_for(
        lambda: Run.objects.get(pk=run_id).status in Run.TERMINAL,
        message="the run to finish",
    )
    return Run.objects.get(pk=run_id)


def test_it_emails_the_real_address_after_approval(processes, alice):
    RedactionRule.objects.create(kind="pattern", value=EMAIL)
    redaction.rules_changed()
    processes.worker()
    run, _ = start_run("refund-bot", {"order_id": "A-1002"}, run_id="email-rule-worker")

    finished = _approve_and_finish(run.id, alice)

    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert _emails(run.id) == ["grace@example.com"]
    assert Step.objects.get(run_id=run.id, name="lookup_order").result["customer"] == (
        redaction.REDACTED
    )


def test_it_emails_the_real_address_after_a_kill_between_lookup_and_approval(
    processes, crash_dir, alice
):
    RedactionRule.objects.create(kind="pattern", value=EMAIL)
    redaction.rules_changed()
    run_id = "email-rule-killed"
    crashpoints.arm(crash_dir, run_id, crashpoints.AFTER_STEP_COMMIT, LOOKUP)
    first = processes.worker(extra_env={"DURABLERUNS_CRASH_DIR": str(crash_dir)})
    start_run("refund-bot", {"order_id": "A-1002"}, run_id=run_id)
    wait_for(lambda: first.poll() is not None, message="the worker to die at the crash point")
    processes.kill(first)  # reap the whole process group
    processes.worker()
    processes.beat()  # the sweeper hands the orphaned run to the new worker

    finished = _approve_and_finish(run_id, alice)

    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert _emails(run_id) == ["grace@example.com"]
    assert (crash_dir / f"{run_id}.fired").exists()


def test_a_key_rule_on_order_id_does_not_break_new_runs_on_a_worker(processes):
    # The worker process loads the admin's rule from the database, as in production.
    RedactionRule.objects.create(kind="key", value="order_id")
    redaction.rules_changed()
    processes.worker()
    run, _ = start_run("refund-bot", {"order_id": "A-1001"}, run_id="order-id-rule-worker")

    wait_for(
        lambda: Run.objects.get(pk=run.id).status in Run.TERMINAL,
        message="the run to finish",
    )

    finished = Run.objects.get(pk=run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert finished.result["refunded"] is True
    assert finished.input["order_id"] == redaction.REDACTED  # what pages and the API read
    assert _emails(run.id) == ["ada@example.com"]
