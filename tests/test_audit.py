"""The audit log is append-only: on Postgres the database refuses UPDATE and DELETE."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from durableruns.models import AuditEvent, Run
from durableruns.services import audit

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigger is Postgres-only"),
]


@pytest.fixture
def event(alice) -> AuditEvent:
    run = Run.objects.create(
        id="audited",
        agent="refund-bot",
        agent_version="1",
        input={},
        max_steps=10,
        max_duration_seconds=60,
    )
    return audit.record(
        alice, "approval.approve", run, before={"state": "pending"}, after={"state": "approved"}
    )


def _refused(statement) -> str:
    with pytest.raises(DatabaseError) as caught, transaction.atomic():
        statement()
    return str(caught.value)


def test_it_refuses_to_update_an_audit_event(event):
    message = _refused(lambda: AuditEvent.objects.filter(pk=event.pk).update(actor_name="eve"))
    assert "append-only (UPDATE refused)" in message
    assert AuditEvent.objects.get(pk=event.pk).actor_name == "alice"


def test_it_refuses_to_delete_an_audit_event(event):
    message = _refused(lambda: AuditEvent.objects.filter(pk=event.pk).delete())
    assert "append-only (DELETE refused)" in message
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_it_refuses_raw_sql_that_rewrites_history(event):
    def rewrite():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE durableruns_auditevent SET action = 'nothing' WHERE id = %s", [event.pk]
            )

    assert "append-only" in _refused(rewrite)
    assert AuditEvent.objects.get(pk=event.pk).action == "approval.approve"
