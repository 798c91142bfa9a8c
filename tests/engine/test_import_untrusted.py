"""importrun treats its file as untrusted input (invariant 15): no effect key of another
run, no decision taken on trust, nothing unfinished executed without a human, deep
values refused with a message, and every import audited."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from durableruns.engine import executor
from durableruns.models import Approval, AuditEvent, Effect, Run, Step
from durableruns.services import approvals
from durableruns.services import runs as run_service
from durableruns.services.exports import ExportError, export_run, import_run
from durableruns.services.sweeper import sweep
from tests.engine.recorded import finished_run
from tests.engine.test_approvals import _suspended

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("rung")]


def _doc(run: Run) -> dict:
    doc = json.loads(json.dumps(export_run(run), default=str))
    Run.objects.all().delete()  # imported into "another database"
    return doc


def _import(doc: dict, tmp_path, *args: str) -> str:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    out = StringIO()
    call_command("importrun", str(path), *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_an_effect_key_of_another_run_is_refused(provider_url, tmp_path):
    doc = _doc(finished_run("forger"))
    # The victim's payout at position 3, before the victim gets there.
    doc["effects"][-1]["idempotency_key"] = "victim:3-refund:refund:0123456789abcdef"

    with pytest.raises(CommandError, match=r"effects\[1\].*does not belong to run forger"):
        _import(doc, tmp_path)

    assert not Run.objects.exists() and not Effect.objects.exists()


def _approved_then_waiting(alice, decided_in: str) -> dict:
    """A run that waits after an approval another database says was decided: in the
    approval row only, or also in the approval's recorded step."""
    run = _suspended({"payload": {"amount": 100, "to": "acct-1"}})
    if decided_in == "step":
        approvals.decide(Approval.objects.get(run=run), "approve", user=alice)
        assert executor.advance(run.pk) == Run.Status.SUCCEEDED
    doc = _doc(run)
    doc["run"].update(status="waiting", result=None, finished_at=None)
    doc["steps"] = [s for s in doc["steps"] if s["name"] != "after"]
    doc["approvals"][0].update(
        state="approved",
        decision="edit",
        decider_name="adm",
        comment="fine",
        edited_payload={"amount": 999_999, "to": "acct-666"},
        decided_at=datetime.now(UTC).isoformat(),
    )
    return doc


@pytest.mark.parametrize("decided_in", ["approval", "step"])
def test_an_imported_decision_is_asked_again(tmp_path, alice, bob, decided_in):
    _import(_approved_then_waiting(alice, decided_in), tmp_path)
    run = Run.objects.get()

    assert run_service.resume(run, user=bob)  # an operator's routine resume
    status = executor.advance(run.pk)

    assert status == Run.Status.AWAITING_APPROVAL
    approval = Approval.objects.get(run=run)
    assert (approval.state, approval.decision, approval.decider_name) == ("pending", "", "")
    assert approval.edited_payload is None
    assert not Step.objects.filter(run=run, name="after").exists()


def test_an_imported_escalation_resolution_is_asked_again(provider_url, tmp_path, bob):
    doc = _doc(finished_run())
    refund = next(e for e in doc["effects"] if e["tool"] == "refund")
    doc["run"].update(status="waiting", result=None, finished_at=None)
    doc["steps"] = [s for s in doc["steps"] if s["position"] < refund["position"]]
    refund.update(state="resolved", resolution="not_happened", note="call it again")

    _import(doc, tmp_path)
    run = Run.objects.get()
    assert run_service.resume(run, user=bob)
    status = executor.advance(run.pk)

    assert status == Run.Status.ESCALATED
    assert Effect.objects.get(tool="refund").state == Effect.State.UNKNOWN


@pytest.mark.parametrize(
    "status", ["queued", "running", "waiting", "awaiting_approval", "awaiting_child"]
)
def test_no_unfinished_status_executes_without_a_human(tmp_path, rung, status):
    doc = _doc(_suspended({"expires_in": 60, "on_expiry": "approve"}))
    doc["run"]["status"] = status
    doc["approvals"][0]["expires_at"] = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    rung.clear()

    _import(doc, tmp_path)
    sweep()
    for run_id in list(rung):
        executor.advance(run_id)

    assert Approval.objects.get().state == Approval.State.PENDING
    assert not Step.objects.filter(name="after").exists()


def test_a_deeply_nested_file_is_refused_with_a_message(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)

    with pytest.raises(CommandError, match="nested too deeply"):
        call_command("importrun", str(path), stdout=StringIO())


def test_a_deeply_nested_value_is_refused_before_anything_is_stored(provider_url):
    doc = _doc(finished_run())
    deep: list = []
    for _ in range(500):
        deep = [deep]
    doc["steps"][0]["result"] = deep

    with pytest.raises(ExportError, match=r"steps\[0\].*nested more than"):
        import_run(doc)

    assert not Run.objects.exists()


def test_an_import_is_audited_with_who_and_the_file_digest(provider_url, tmp_path, bob):
    doc = _doc(finished_run())

    _import(doc, tmp_path, "--user", "bob")

    event = AuditEvent.objects.get(action="run.import")
    assert (event.actor_name, event.target_id) == ("bob", "recorded")
    digest = hashlib.sha256((tmp_path / "run.json").read_bytes()).hexdigest()
    assert event.after["sha256"] == digest


def test_an_unknown_user_is_refused(provider_url, tmp_path):
    doc = _doc(finished_run())

    with pytest.raises(CommandError, match="no user 'nobody'"):
        _import(doc, tmp_path, "--user", "nobody")

    assert not Run.objects.exists()


def test_a_decided_approval_expires_only_if_reasked_with_a_deadline(tmp_path):
    # Re-asked approvals drop the imported deadline: no expiry default decides for anyone.
    doc = _doc(_suspended({"expires_in": 60, "on_expiry": "approve"}))
    _import(doc, tmp_path)
    assert Approval.objects.get().expires_at is None
    assert approvals.expire_due() == 0
