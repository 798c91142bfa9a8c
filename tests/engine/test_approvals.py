"""run.approval(): suspends without a worker, returns the decision, expires as the system.

The executor runs in-process here (real Postgres); tests/chaos/test_approvals.py
does the same with real worker processes.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

import durableruns as dr
from durableruns.engine import executor, gates, store
from durableruns.engine.errors import Suspend
from durableruns.engine.runs import start_run
from durableruns.models import Approval, AuditEvent, Run, Step
from durableruns.services import approvals
from durableruns.services.sweeper import sweep
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("rung")]


@dr.agent("approval-probe", version="1")
def approval_probe(run: dr.Run, task: dict) -> dict:
    decision = run.approval(
        "ship",
        summary="Ship the parcel?",
        payload=task.get("payload", {"parcels": 2}),
        expires_in=task.get("expires_in"),
        on_expiry=task.get("on_expiry", "reject"),
        schema=task.get("schema"),
        four_eyes=task.get("four_eyes", False),
        guards={"tool": "ship_parcel", "args": {"parcels": 2}},
    )
    after = run.step("after", lambda: "continued")
    return {
        "approved": decision.approved,
        "decision": decision.decision,
        "payload": decision.payload,
        "comment": decision.comment,
        "decider": decision.decider,
        "after": after,
    }


def _suspended(task: dict | None = None, user=None) -> Run:
    run, _ = start_run("approval-probe", task or {}, user=user)
    assert executor.advance(run.id) == Run.Status.AWAITING_APPROVAL
    return Run.objects.get(pk=run.id)


def _approval(run: Run) -> Approval:
    return Approval.objects.select_related("run").get(run=run)


def _finish(run: Run) -> Run:
    assert executor.advance(run.id) == Run.Status.SUCCEEDED
    return Run.objects.get(pk=run.id)


def test_it_suspends_awaiting_approval_holding_no_lease():
    run = _suspended()
    assert run.status == Run.Status.AWAITING_APPROVAL
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    approval = _approval(run)
    assert approval.state == Approval.State.PENDING
    assert approval.payload == {"parcels": 2}
    assert not Step.objects.filter(run=run).exists()
    assert executor.advance(run.id) == "skipped"  # a stray doorbell does not run it


def test_it_returns_the_decision_to_agent_code_and_continues(alice, rung):
    run = _suspended()
    rung.clear()
    approvals.decide(_approval(run), "approve", user=alice, comment="looks right")
    assert Run.objects.get(pk=run.id).status == Run.Status.QUEUED
    assert rung == [run.id]  # the decision rings at once; no sweep needed
    run = _finish(run)
    assert run.result == {
        "approved": True,
        "decision": "approve",
        "payload": {"parcels": 2},
        "comment": "looks right",
        "decider": "alice",
        "after": "continued",
    }
    step = Step.objects.get(run=run, position=0)
    assert (step.kind, step.result["decider"]) == (Step.Kind.APPROVAL, "alice")


def test_it_gives_agent_code_the_edited_payload(alice):
    run = _suspended()
    approvals.decide(_approval(run), "edit", user=alice, payload='{"parcels": 1}')
    assert _finish(run).result["payload"] == {"parcels": 1}


def test_it_ends_as_the_agent_decides_on_rejection(alice):
    run = _suspended()
    approvals.decide(_approval(run), "reject", user=alice, comment="wrong address")
    result = _finish(run).result
    assert (result["approved"], result["comment"]) == (False, "wrong address")


def test_it_refuses_an_edit_that_breaks_the_schema(alice):
    schema = {
        "type": "object",
        "properties": {"parcels": {"type": "integer", "maximum": 2}},
        "required": ["parcels"],
    }
    approval = _approval(_suspended({"schema": schema}))
    for bad in ('{"parcels": 9}', "[1, 2]", "{not json"):
        with pytest.raises(approvals.InvalidEdit):
            approvals.decide(approval, "edit", user=alice, payload=bad)
    assert _approval(approval.run).state == Approval.State.PENDING
    assert not AuditEvent.objects.exists()


def test_it_refuses_approval_by_the_run_creator_under_four_eyes(alice, carol):
    approval = _approval(_suspended({"four_eyes": True}, user=alice))
    with pytest.raises(approvals.FourEyesRefused):
        approvals.decide(approval, "approve", user=alice)
    assert approvals.decide(approval, "approve", user=carol).decider_name == "carol"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent writers")
def test_it_gives_one_decision_to_two_concurrent_reviewers(alice, carol):
    run = _suspended()
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def review(user, decision):
        approval = _approval(run)  # both load it while it is still pending
        barrier.wait()
        try:
            outcomes[user.username] = approvals.decide(approval, decision, user=user, comment="no")
        except approvals.AlreadyDecided as exc:
            outcomes[user.username] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=review, args=(alice, "approve")),
        threading.Thread(target=review, args=(carol, "reject")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    losers = [o for o in outcomes.values() if isinstance(o, approvals.AlreadyDecided)]
    assert len(losers) == 1
    winner = _approval(run)
    assert losers[0].decider == winner.decider_name
    assert f"by {winner.decider_name} at" in str(losers[0])
    assert AuditEvent.objects.filter(action__startswith="approval.").count() == 1


def test_it_expires_with_the_on_expiry_default_recorded_as_the_system():
    run = _suspended({"expires_in": 0.2})
    wait_for(
        lambda: sweep() and _approval(run).state == Approval.State.EXPIRED,
        timeout=10,
        message="the sweeper to expire the approval",
    )
    event = AuditEvent.objects.get(target_type="approval")
    assert (event.action, event.actor_name, event.actor_id) == ("approval.expire", "system", None)
    result = _finish(run).result
    assert (result["approved"], result["decision"], result["decider"]) == (
        False,
        "expire",
        "system",
    )


def test_it_can_default_to_approve_on_expiry():
    run = _suspended({"expires_in": 0.2, "on_expiry": "approve"})
    wait_for(
        lambda: sweep() and _approval(run).state == Approval.State.EXPIRED,
        timeout=10,
        message="the sweeper to expire the approval",
    )
    assert _finish(run).result["approved"] is True


def test_it_leaves_an_approval_alone_before_its_deadline():
    run = _suspended({"expires_in": 3600})
    sweep()
    assert _approval(run).state == Approval.State.PENDING
    assert Run.objects.get(pk=run.id).status == Run.Status.AWAITING_APPROVAL


def test_it_wakes_a_run_decided_before_it_finished_suspending(alice):
    run, _ = start_run("approval-probe", {})
    lease = store.acquire_lease(run.id, "test-executor")
    gate = gates.Gate.build(
        summary="",
        payload={},
        allowed=gates.DECISIONS,
        expires_in=None,
        on_expiry="reject",
        schema=None,
        guards=None,
        four_eyes=False,
    )
    approval = gates.open_approval(lease, 0, "ship", gate)
    approvals.decide(approval, "approve", user=alice)  # run still `running`: no wake-up yet
    suspend = Suspend(Run.Status.AWAITING_APPROVAL, approval_position=0)
    assert executor._suspend(lease, suspend, None) == Run.Status.QUEUED
    assert Run.objects.get(pk=run.id).status == Run.Status.QUEUED


def test_it_emails_reviewers_a_link_to_the_waiting_approval(alice, bob, mailoutbox, settings):
    settings.DURABLERUNS_BASE_URL = "https://runs.example.com"
    alice.email, bob.email = "alice@example.com", "bob@example.com"
    alice.save()
    bob.save()
    approval = _approval(_suspended())
    assert len(mailoutbox) == 1
    message = mailoutbox[0]
    assert message.to == ["alice@example.com"]  # bob is an operator: not asked
    assert f"https://runs.example.com/approvals/{approval.pk}/" in message.body
    assert "Ship the parcel?" in message.body


def test_it_does_not_count_waiting_for_a_person_against_the_time_budget(alice):
    run = _suspended()
    Run.objects.filter(pk=run.id).update(max_duration_seconds=1.0)
    time.sleep(1.2)  # the wait being measured: a person taking longer than the budget
    approvals.decide(_approval(run), "approve", user=alice)
    assert _finish(run).result["after"] == "continued"


def test_it_exports_approvals_and_their_audit_events(alice):
    from durableruns.services.exports import export_run

    run = _suspended()
    approvals.decide(_approval(run), "reject", user=alice, comment="no")
    exported = export_run(_finish(run))
    assert [(a["name"], a["state"], a["decider_name"]) for a in exported["approvals"]] == [
        ("ship", "rejected", "alice")
    ]
    assert [(e["actor"], e["action"]) for e in exported["audit"]] == [("alice", "approval.reject")]


def test_it_redacts_secrets_before_showing_the_payload_to_reviewers():
    run = _suspended({"payload": {"card_number": "4242 4242 4242 4242", "note": "ok"}})
    assert _approval(run).payload == {"card_number": "[REDACTED]", "note": "ok"}


@dr.agent("ignore-probe", version="1")
def ignore_probe(run: dr.Run, task: dict) -> dict:
    decision = run.approval(
        "ship",
        summary="Ship the parcel?",
        payload={"parcels": 2},
        allowed=task.get("allowed", ("approve", "reject", "ignore")),
        four_eyes=True,
    )
    shipped = run.step("ship", lambda: "shipped") if decision.approved else None
    return {"decision": decision.decision, "ignored": decision.ignored, "shipped": shipped}


def test_an_ignored_request_approves_nothing_and_the_agent_is_told(alice):
    # Under four-eyes the run's starter may still ignore it, as they may reject it.
    run, _ = start_run("ignore-probe", {}, user=alice)
    assert executor.advance(run.id) == Run.Status.AWAITING_APPROVAL
    approval = _approval(run)
    decided = approvals.decide(approval, "ignore", user=alice)
    assert (decided.state, decided.decided_as) == (Approval.State.IGNORED, "Ignored")
    assert AuditEvent.objects.get(action="approval.ignore").actor_name == "alice"
    result = _finish(run).result
    assert result == {"decision": "ignore", "ignored": True, "shipped": None}
    assert list(Step.objects.filter(run=run).values_list("kind", flat=True)) == ["approval"]


def test_ignore_needs_the_agent_to_allow_it(alice):
    run, _ = start_run("ignore-probe", {"allowed": ["approve", "reject"]})
    assert executor.advance(run.id) == Run.Status.AWAITING_APPROVAL
    with pytest.raises(approvals.DecisionRefused, match="does not allow 'ignore'"):
        approvals.decide(_approval(run), "ignore", user=alice)
    assert _approval(run).state == Approval.State.PENDING
