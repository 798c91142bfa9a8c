"""A fork past an approval that guards the effects it executes again asks a reviewer
again, unless the forking person may approve and says so; audited either way."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from durableruns.demo.models import ProviderCall
from durableruns.engine.replay import ForkError, approvals_to_ask_again
from durableruns.engine.runs import start_run
from durableruns.models import Approval, AuditEvent, Run
from durableruns.services import approvals
from durableruns.services.runs import fork

pytestmark = pytest.mark.django_db(transaction=True)

BIG_REFUND = {"order_id": "A-1002"}  # 25,000 cents: over the approval threshold
APPROVAL, REFUND = 2, 3  # refund-bot: plan, lookup, approval, refund, email, summary


def _refunds() -> int:
    return ProviderCall.objects.filter(provider="payments", outcome="executed").count()


def _decide(run_id: str, decision: str, user) -> None:
    approval = Approval.objects.get(run_id=run_id, state=Approval.State.PENDING)
    approvals.decide(approval, decision, user=user, comment="decided in a test")


@pytest.fixture
def approved_parent(drive, provider_url, alice) -> Run:
    start_run("refund-bot", BIG_REFUND, run_id="gated")
    assert drive("gated").status == Run.Status.AWAITING_APPROVAL
    _decide("gated", "approve", alice)
    done = drive("gated")
    assert done.status == Run.Status.SUCCEEDED, done.error
    assert _refunds() == 1
    return done


def test_a_fork_past_the_approval_asks_again_before_refunding(drive, approved_parent, alice, bob):
    assert [s.position for s in approvals_to_ask_again(approved_parent, REFUND)] == [APPROVAL]
    child = fork(approved_parent, REFUND, user=bob)

    assert drive(child.id).status == Run.Status.AWAITING_APPROVAL
    assert _refunds() == 1, "no second refund before a reviewer approves"
    event = AuditEvent.objects.get(action="run.fork")
    assert event.after["approvals_asked_again"] == [APPROVAL]

    _decide(child.id, "approve", alice)
    assert drive(child.id).status == Run.Status.SUCCEEDED
    assert _refunds() == 2


def test_a_reviewer_rejecting_the_fork_stops_the_second_refund(drive, approved_parent, alice, bob):
    child = fork(approved_parent, REFUND, user=bob)
    drive(child.id)
    _decide(child.id, "reject", alice)
    done = drive(child.id)
    assert done.status == Run.Status.SUCCEEDED, done.error
    assert done.result["refunded"] is False
    assert _refunds() == 1


def test_an_operator_who_cannot_approve_may_not_reuse_the_approval(approved_parent, bob):
    with pytest.raises(PermissionDenied):
        fork(approved_parent, REFUND, user=bob, reuse_approvals=True)
    assert Run.objects.count() == 1
    assert not AuditEvent.objects.filter(action="run.fork").exists()


def test_an_admin_may_reuse_the_approval_explicitly_and_it_is_audited(
    drive, approved_parent, carol
):
    child = fork(approved_parent, REFUND, user=carol, reuse_approvals=True)
    assert drive(child.id).status == Run.Status.SUCCEEDED
    assert _refunds() == 2
    event = AuditEvent.objects.get(action="run.fork")
    assert event.after["approvals_reused_by_forker"] == [APPROVAL]
    assert event.after["approvals_asked_again"] == []


def test_a_sandbox_fork_reuses_the_approval_because_it_refunds_nothing(drive, approved_parent, bob):
    child = fork(approved_parent, REFUND, user=bob, sandbox=True)
    assert drive(child.id).status == Run.Status.SUCCEEDED
    assert _refunds() == 1


def test_the_fork_preview_says_the_approval_will_be_asked_again(client, approved_parent, bob):
    client.force_login(bob)
    page = client.get(reverse("run-fork", args=["gated"]), {"position": REFUND})
    assert page.status_code == 200
    assert "1 approval will be asked again" in page.content.decode()
    assert 'name="reuse_approvals"' not in page.content.decode(), "bob cannot approve"


# --- A decision is never edited into existence (issue 22) ------------------------

FORGED = {
    "decision": "approve",
    "approved": True,
    "payload": {"order_id": "A-1002", "cents": 1_000_000, "customer": "acct-666"},
    "comment": "",
    "decider": "alice",
    "decided_at": "2026-01-01T00:00:00+00:00",
}


@pytest.fixture
def rejected_parent(drive, provider_url, alice) -> Run:
    start_run("refund-bot", BIG_REFUND, run_id="rejected")
    assert drive("rejected").status == Run.Status.AWAITING_APPROVAL
    _decide("rejected", "reject", alice)
    done = drive("rejected")
    assert done.result["refunded"] is False
    return done


def _asked_a_reviewer(client, alice, child_id: str) -> None:
    """The forged fork refunds nothing, waits, and a reviewer sees a fresh approval."""
    assert _refunds() == 0
    assert Run.objects.get(pk=child_id).status == Run.Status.AWAITING_APPROVAL
    pending = Approval.objects.get(run_id=child_id, state=Approval.State.PENDING)
    assert pending.position == APPROVAL and pending.payload["cents"] == 25_000
    client.force_login(alice)
    assert (
        reverse("approval", args=[pending.pk]) in client.get(reverse("approvals")).content.decode()
    )


def test_an_operators_api_fork_cannot_edit_a_rejection_into_an_approval(
    client, drive, rejected_parent, alice, bob
):
    client.force_login(bob)
    response = client.post(
        "/api/runs/rejected/fork/",
        {"position": APPROVAL + 1, "output": FORGED},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    child = drive(response.json()["id"])
    _asked_a_reviewer(client, alice, child.id)
    event = AuditEvent.objects.get(action="run.fork")
    assert event.after["approvals_asked_again"] == [APPROVAL]


def test_an_operators_web_fork_cannot_edit_a_rejection_into_an_approval(
    client, drive, rejected_parent, alice, bob
):
    client.force_login(bob)
    form = {"position": APPROVAL + 1, "output": json.dumps(FORGED), "reason": "pay it"}
    preview = client.post(reverse("run-fork", args=["rejected"]), {**form, "check": "1"})
    assert "asks a reviewer again" in preview.content.decode()
    response = client.post(reverse("run-fork", args=["rejected"]), form, follow=True)
    assert response.status_code == 200
    child = Run.objects.get(parent_id="rejected")
    assert "a reviewer is asked again" in response.content.decode()
    drive(child.id)
    _asked_a_reviewer(client, alice, child.id)


def test_an_admin_cannot_reuse_approvals_for_a_fork_that_edits(drive, approved_parent, carol):
    receipt = {"id": "forged", "cents": 1_000_000}
    with pytest.raises(ForkError, match="asked again"):
        fork(approved_parent, REFUND + 1, user=carol, reuse_approvals=True, output=receipt)
    assert Run.objects.count() == 1


def test_a_fork_that_edits_past_an_approval_asks_it_again(drive, approved_parent, alice, bob):
    summary = approved_parent.steps.get(position=REFUND + 2).result
    edited = {**summary, "content": "edited by hand"}
    child = fork(approved_parent, REFUND + 3, user=bob, output=edited)
    assert drive(child.id).status == Run.Status.AWAITING_APPROVAL
    assert _refunds() == 1
    _decide(child.id, "approve", alice)
    assert drive(child.id).status == Run.Status.SUCCEEDED
    assert _refunds() == 1, "the refund step is reused: nothing new executes"


def test_a_fork_that_does_not_touch_approvals_still_works(drive, approved_parent, bob):
    child = fork(approved_parent, REFUND + 3, user=bob)
    done = drive(child.id)
    assert done.status == Run.Status.SUCCEEDED, done.error
    assert _refunds() == 1
    assert not Approval.objects.filter(run_id=child.id).exists()


def test_a_four_eyes_approval_is_never_reused_by_the_forker(approved_parent, carol):
    step = approved_parent.steps.get(position=APPROVAL)
    step.input = {**step.input, "four_eyes": True}  # as a four-eyes gate records itself
    step.save(update_fields=["input"])
    with pytest.raises(ForkError, match="four eyes"):
        fork(approved_parent, REFUND, user=carol, reuse_approvals=True)
    child = fork(approved_parent, REFUND, user=carol)
    assert AuditEvent.objects.get(action="run.fork").after["approvals_asked_again"] == [APPROVAL]
    assert not child.steps.filter(position=APPROVAL).exists()
