"""The step checkpoint's statement: prepared once per connection, on one kept cursor."""

from __future__ import annotations

import pytest
from django.db import connection

from durableruns.engine.runs import start_run
from durableruns.models import Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


def _prepared_step_inserts() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements "
            "WHERE statement LIKE 'INSERT INTO durableruns_step%%'"
        )
        return [row[0] for row in cursor.fetchall()]


def test_the_fenced_step_insert_is_a_prepared_statement_on_djangos_connection(drive):
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are a Postgres matter")
    run, _ = start_run("t-looping", {}, run_id="hot-1")
    drive(run.id)  # five steps, then the step budget stops it
    assert Step.objects.filter(run_id="hot-1").count() == 5
    # Django opens connections with prepare_threshold=None, which made psycopg ignore
    # prepare=True: the statement was parsed and planned on every step.
    assert len(_prepared_step_inserts()) == 1


def test_a_new_connection_gets_a_new_cursor(drive):
    if connection.vendor != "postgresql":
        pytest.skip("the kept cursor is the psycopg path")
    start_run("t-looping", {}, run_id="hot-2")
    drive("hot-2")
    first = connection._durableruns_hot_cursor
    connection.close()
    start_run("t-looping", {}, run_id="hot-3")
    assert drive("hot-3").status == Run.Status.FAILED
    assert Step.objects.filter(run_id="hot-3").count() == 5
    assert connection._durableruns_hot_cursor is not first
    assert connection._durableruns_hot_cursor.connection is connection.connection
