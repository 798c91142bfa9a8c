"""Retention scrubs the audit trail's payloads too: after a run is redacted or deleted
its history still says who did what and when, but no input, edit or e-mail remains."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction

from durableruns.models import Approval, AuditEvent, Effect, RetentionPolicy, Run
from durableruns.services import audit, retention
from tests.admin.factories import make_run

pytestmark = pytest.mark.django_db

EMAIL = "customer-4471@example.com"
MARKER = retention.REDACTED_PAYLOAD


def _audited_run(run_id: str, actor) -> list[AuditEvent]:
    run = make_run(run_id, "succeeded")
    approval = Approval.objects.create(
        run=run, position=2, name="refund", payload={"to": EMAIL}, state="approved"
    )
    effect = Effect.objects.get(run=run)
    return [
        audit.record(actor, "run.start", run, after={"input": {"email": EMAIL}}),
        audit.record(
            actor,
            "approval.edit",
            approval,
            before={"payload": {"to": EMAIL}},
            after={"payload": {"to": EMAIL, "cents": 5000}},
        ),
        audit.record(actor, "effect.resolve", effect, after={"note": f"mailed {EMAIL}"}),
        audit.record(actor, "run.cancel", run),  # no payload: stays empty
    ]


def _policy(action: str) -> RetentionPolicy:
    return RetentionPolicy.objects.create(
        name=action, agent="refund-bot", statuses=["succeeded"], age_days=30, action=action
    )


def _payloads(events: list[AuditEvent]) -> list[tuple]:
    rows = AuditEvent.objects.filter(pk__in=[e.pk for e in events]).order_by("pk")
    return list(rows.values_list("before", "after"))


def _history(events: list[AuditEvent]) -> list[tuple]:
    rows = AuditEvent.objects.filter(pk__in=[e.pk for e in events]).order_by("pk")
    fields = ("actor_id", "actor_name", "action", "target_type", "target_id", "created_at")
    return list(rows.values_list(*fields))


@pytest.mark.parametrize("action", ["redact", "delete"])
def test_it_scrubs_the_runs_audit_payloads_and_keeps_who_did_what(action, carol):
    events = _audited_run("old", carol)
    kept = _audited_run("still-running", carol)  # another run's trail: untouched
    Run.objects.filter(pk="still-running").update(finished_at=None, status="running")
    history = _history(events)

    retention.apply(_policy(action))

    assert _payloads(events) == [
        (None, MARKER),
        (MARKER, MARKER),
        (None, MARKER),
        (None, None),
    ]
    assert _history(events) == history
    assert EMAIL in str(_payloads(kept))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigger is Postgres-only")
@pytest.mark.parametrize(
    "change",
    [
        "after = '\"something else\"'::jsonb",
        "after = NULL",
        "action = 'nothing', after = '\"[REDACTED by retention]\"'::jsonb",
        "created_at = now(), before = '\"[REDACTED by retention]\"'::jsonb",
    ],
)
def test_the_trigger_allows_only_the_retention_marker(change, carol):
    event = _audited_run("old", carol)[0]
    with (
        pytest.raises(DatabaseError) as caught,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f"UPDATE durableruns_auditevent SET {change} WHERE id = %s",  # noqa: S608
            [event.pk],
        )
    assert "append-only (UPDATE refused)" in str(caught.value)
    assert AuditEvent.objects.get(pk=event.pk).after == {"input": {"email": EMAIL}}


@pytest.mark.parametrize("action", ["redact", "delete"])
def test_each_run_retention_touched_has_an_entry_in_the_audit_log(action, carol):
    for run_id in ("old-1", "old-2"):
        make_run(run_id, "succeeded")
    make_run("recent", "succeeded", age=timedelta(days=1))

    retention.apply(_policy(action))

    entries = AuditEvent.objects.filter(action=f"run.{action}_by_retention")
    assert sorted(entries.values_list("target_id", flat=True)) == ["old-1", "old-2"]
    assert {(e.actor_id, e.actor_name, e.after["policy"]) for e in entries} == {
        (None, "system", action)
    }


def test_a_redacted_run_says_so_in_its_own_trail(client, carol):
    make_run("old", "succeeded")
    retention.apply(_policy("redact"))

    trail = AuditEvent.objects.for_run(Run.objects.get(pk="old"))
    assert [e.action for e in trail] == ["run.redact_by_retention"]
    client.force_login(carol)
    body = client.get("/runs/old/").content.decode()
    assert "run.redact_by_retention" in body or "Redacted by retention policy" in body
