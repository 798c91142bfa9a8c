"""Cancelling a run closes its pending approvals (closed by the cancel, not decided);
resuming it asks again."""

from __future__ import annotations

import pytest

from durableruns.engine.runs import start_run
from durableruns.models import Approval, AuditEvent, Run
from durableruns.services import approvals
from durableruns.services import runs as operations

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(drive, provider_url) -> Run:
    start_run("refund-bot", {"order_id": "A-1002"}, run_id="gated")
    run = drive("gated")
    assert run.status == Run.Status.AWAITING_APPROVAL
    return run


def test_cancel_closes_the_pending_approval_without_a_decision(waiting, bob, client, alice):
    assert operations.cancel(waiting, user=bob)
    approval = Approval.objects.get(run=waiting)
    assert approval.state == Approval.State.CLOSED
    assert (approval.decision, approval.decided_by, approval.decider_name) == ("", None, "")
    assert "cancelled by bob" in approval.comment
    event = AuditEvent.objects.get(action="run.cancel")
    assert event.after["closed_approvals"] == [approval.pk]
    assert not Approval.objects.filter(state=Approval.State.PENDING).exists()

    with pytest.raises(approvals.AlreadyDecided):
        approvals.decide(approval, "approve", user=alice)
    client.force_login(alice)
    page = client.get(approval.get_absolute_url()).content.decode()
    assert "when the run was cancelled" in page


def test_resuming_a_cancelled_run_asks_the_reviewer_again(drive, waiting, bob, alice):
    operations.cancel(waiting, user=bob)
    operations.resume(Run.objects.get(pk="gated"), user=bob)
    assert drive("gated").status == Run.Status.AWAITING_APPROVAL
    approval = Approval.objects.get(run_id="gated")
    assert approval.state == Approval.State.PENDING
    approvals.decide(approval, "approve", user=alice)
    assert drive("gated").status == Run.Status.SUCCEEDED
