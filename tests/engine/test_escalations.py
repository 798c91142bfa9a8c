"""Resolving an escalated effect: the bookkeeping (who, when, audit, idempotency, validation).

What the engine then does with each resolution, with real workers and providers,
is in tests/chaos/test_escalation_resolutions.py.
"""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.utils import timezone

from durableruns.engine.errors import SerializationError
from durableruns.models import AuditEvent, Effect, Run
from durableruns.services import escalations
from durableruns.services.exports import export_run

pytestmark = pytest.mark.django_db

RESULT = {"refund_id": "re_manual", "status": "succeeded"}


@pytest.fixture
def effect() -> Effect:
    """An unsafe refund whose outcome is unknown, its run escalated (as the engine leaves it)."""
    run = Run.objects.create(
        id="escalated-1",
        agent="refund-bot",
        agent_version="1",
        input={"order_id": "A-1001", "payments": "none"},
        status=Run.Status.ESCALATED,
        max_steps=20,
        max_duration_seconds=1800,
    )
    return Effect.objects.create(
        run=run,
        position=2,
        idempotency_key="escalated-1:2-refund_unsafe:refund_unsafe:0123",
        tool="refund_unsafe",
        tool_kind="unsafe_write",
        fingerprint="0123",
        args={"order_id": "A-1001", "cents": 4500},
        state=Effect.State.UNKNOWN,
        started_at=timezone.now(),
    )


def _unchanged(effect: Effect) -> None:
    effect.refresh_from_db()
    assert (effect.state, effect.resolution, effect.result) == (Effect.State.UNKNOWN, "", None)
    assert Run.objects.get(pk=effect.run_id).status == Run.Status.ESCALATED
    assert not AuditEvent.objects.filter(action="effect.resolve").exists()


def test_it_records_who_resolved_it_when_and_why(effect, bob):
    resolved = escalations.resolve(
        effect, "happened", user=bob, result=RESULT, note="the bank statement shows it"
    )
    assert resolved.state == Effect.State.RESOLVED
    assert resolved.resolution == Effect.Resolution.HAPPENED
    assert resolved.result == RESULT
    assert resolved.resolved_by == bob
    assert resolved.resolved_at is not None
    assert resolved.note == "the bank statement shows it"


def test_it_audits_the_resolution(effect, bob):
    escalations.resolve(effect, "not_happened", user=bob, note="no charge at the bank")
    event = AuditEvent.objects.get(action="effect.resolve")
    assert (event.actor_name, event.target_type, event.target_id) == (
        "bob",
        "effect",
        str(effect.pk),
    )
    assert event.before["state"] == "unknown"
    assert event.after == {
        "state": "resolved",
        "resolution": "not_happened",
        "note": "no charge at the bank",
    }


@pytest.mark.parametrize("resolution", ["happened", "not_happened"])
def test_it_wakes_the_escalated_run(effect, bob, resolution):
    result = RESULT if resolution == "happened" else None
    escalations.resolve(effect, resolution, user=bob, result=result)
    assert Run.objects.get(pk=effect.run_id).status == Run.Status.QUEUED


def test_it_cancels_the_run_when_aborted(effect, bob):
    escalations.resolve(effect, "aborted", user=bob, note="customer withdrew")
    assert Run.objects.get(pk=effect.run_id).status == Run.Status.CANCELLED
    assert AuditEvent.objects.filter(action="run.cancel", actor_name="bob").exists()


def test_it_ignores_the_same_resolution_repeated(effect, bob, carol):
    first = escalations.resolve(effect, "happened", user=bob, result=RESULT)
    again = escalations.resolve(effect, "happened", user=carol, result=dict(RESULT))
    assert (again.resolved_by, again.resolved_at) == (bob, first.resolved_at)
    assert AuditEvent.objects.filter(action="effect.resolve").count() == 1


def test_it_refuses_another_resolution_and_says_who_decided(effect, bob, carol):
    escalations.resolve(effect, "not_happened", user=bob)
    with pytest.raises(escalations.AlreadyResolved, match=r"'not_happened' by bob at \d{4}-"):
        escalations.resolve(effect, "aborted", user=carol)
    assert Run.objects.get(pk=effect.run_id).status == Run.Status.QUEUED


def test_it_refuses_the_same_resolution_with_another_result(effect, bob):
    escalations.resolve(effect, "happened", user=bob, result=RESULT)
    with pytest.raises(escalations.AlreadyResolved):
        escalations.resolve(effect, "happened", user=bob, result={"refund_id": "re_other"})


@pytest.mark.parametrize("result", [{"cents": math.nan}, {"when": timezone.now()}, {1: "x"}])
def test_it_rejects_a_result_that_is_not_json_and_changes_nothing(effect, bob, result):
    with pytest.raises(SerializationError, match="not JSON-serialisable"):
        escalations.resolve(effect, "happened", user=bob, result=result)
    _unchanged(effect)


def test_it_rejects_result_text_that_is_not_json(effect):
    with pytest.raises(SerializationError, match="the result is not valid JSON"):
        escalations.parse_result("{'refund_id': 're_1'")


def test_it_rejects_a_result_over_the_payload_limit(effect, bob, settings):
    settings.DURABLERUNS_MAX_PAYLOAD_BYTES = 100
    with pytest.raises(SerializationError, match="over the 100-byte limit"):
        escalations.resolve(effect, "happened", user=bob, result={"blob": "x" * 200})
    _unchanged(effect)


def test_it_needs_the_result_when_it_happened(effect, bob):
    with pytest.raises(escalations.EscalationError, match="needs the result"):
        escalations.resolve(effect, "happened", user=bob)
    _unchanged(effect)


def test_it_rejects_an_unknown_resolution(effect, bob):
    with pytest.raises(escalations.EscalationError, match="unknown resolution 'maybe'"):
        escalations.resolve(effect, "maybe", user=bob)
    _unchanged(effect)


def test_it_requires_the_operator_role(effect, alice):
    with pytest.raises(PermissionDenied):
        escalations.resolve(effect, "not_happened", user=alice)
    _unchanged(effect)


def test_it_refuses_an_effect_whose_outcome_is_known(effect, bob):
    Effect.objects.filter(pk=effect.pk).update(state=Effect.State.SUCCEEDED, result=RESULT)
    with pytest.raises(escalations.NotEscalated, match="only an unknown outcome"):
        escalations.resolve(effect, "not_happened", user=bob)


def test_the_command_resolves_with_a_json_result(effect, bob, capsys):
    call_command(
        "resolve",
        str(effect.pk),
        "happened",
        "--result",
        '{"refund_id": "re_cli"}',
        "--note",
        "seen in the dashboard",
        "--user",
        "bob",
    )
    effect.refresh_from_db()
    assert (effect.resolution, effect.result, effect.note) == (
        "happened",
        {"refund_id": "re_cli"},
        "seen in the dashboard",
    )
    assert "resolved as happened by bob; run escalated-1 is queued" in capsys.readouterr().out


def test_the_command_rejects_invalid_json_clearly_and_changes_nothing(effect, bob):
    with pytest.raises(CommandError, match="the result is not valid JSON"):
        call_command("resolve", str(effect.pk), "happened", "--result", "{nope", "--user", "bob")
    _unchanged(effect)


def test_the_command_refuses_a_user_without_the_operator_role(effect, alice):
    with pytest.raises(CommandError, match="alice may not resolve escalations"):
        call_command("resolve", str(effect.pk), "not_happened", "--user", "alice")
    _unchanged(effect)


def test_the_export_carries_the_resolution_its_effect_id_and_resolver(effect, bob, client):
    escalations.resolve(effect, "not_happened", user=bob, note="no charge at the bank")
    doc = export_run(Run.objects.get(pk=effect.run_id))
    (exported,) = doc["effects"]
    assert (exported["id"], exported["resolved_by"]) == (effect.pk, "bob")
    actions = [(e["action"], e["target_type"]) for e in doc["audit"]]
    assert ("effect.resolve", "effect") in actions


def test_the_api_and_the_run_page_show_the_same_audit_trail(effect, bob, client):
    escalations.resolve(effect, "aborted", user=bob)
    client.force_login(bob)
    api = client.get(f"/api/runs/{effect.run_id}/audit/").json()
    expected = list(AuditEvent.objects.for_run(Run.objects.get(pk=effect.run_id)))
    assert [e["id"] for e in api] == [e.pk for e in expected]
    assert {e["action"] for e in api} == {"effect.resolve", "run.cancel"}
    page = client.get(f"/runs/{effect.run_id}/").content.decode()
    assert "effect.resolve" in page and "run.cancel" in page
