"""The test suite's flush (tests/fast_flush.py) empties every table, audit log included."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection
from django.utils import timezone

from durableruns.models import AuditEvent, Run, Step
from durableruns.services import audit

pytestmark = pytest.mark.django_db(transaction=True)


def _row_counts() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.django_table_names(only_existing=True):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")  # noqa: S608
            counts[table] = cursor.fetchone()[0]
    return counts


def test_the_flush_leaves_no_row_in_any_table(django_user_model):
    user = django_user_model.objects.create_user("flushme", password="x")
    run = Run.objects.create(
        id="flush-1", agent="a", agent_version="1", input={}, max_steps=1, max_duration_seconds=1
    )
    now = timezone.now()
    Step.objects.create(
        run=run, position=0, step_id="s", kind="step", name="s", started_at=now, finished_at=now
    )
    audit.record(user, "run.cancel", run)
    assert AuditEvent.objects.count() == 1

    call_command("flush", interactive=False, inhibit_post_migrate=True)

    assert {table: n for table, n in _row_counts().items() if n} == {}


def test_the_flush_deletes_instead_of_truncating_the_untriggered_tables():
    sql = connection.ops.sql_flush(no_style(), ["durableruns_run", "durableruns_auditevent"])
    assert sql[0].startswith("TRUNCATE") and "durableruns_auditevent" in sql[0]
    assert sql[1:] == ['DELETE FROM "durableruns_run";']
