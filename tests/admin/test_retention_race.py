"""Retention against a concurrent hold: a run put on legal hold while a sweep is
choosing its batch is never deleted, because each batch locks its rows and checks
the policy again on the locked row (SKIP LOCKED: a row someone is changing waits for
the next sweep)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from durableruns.models import RetentionPolicy, RetentionSweep, Run
from durableruns.services import retention
from tests.admin.factories import make_run
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _other_session() -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params)


def _blocked_on_a_lock(session: psycopg.Connection) -> bool:
    """Whether any backend but `session`'s is waiting for a row lock."""
    with _other_session() as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND pid <> %s",
            [session.info.backend_pid],
        ).fetchone()
    return bool(row and row[0])


def test_a_run_put_on_hold_during_a_sweep_is_not_deleted():
    make_run("old", Run.Status.SUCCEEDED)
    policy = RetentionPolicy.objects.create(
        name="drop-old", agent="", statuses=["succeeded"], age_days=30, action="delete"
    )
    holder = _other_session()
    # An operator's hold, not yet committed: it holds the run's row lock.
    holder.execute("UPDATE durableruns_run SET legal_hold = true WHERE id = 'old'")

    sweeps: list[RetentionSweep] = []

    def sweep() -> None:
        try:
            sweeps.append(retention.apply(policy))
        finally:
            connection.close()

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    # Either the sweep skipped the locked row and finished, or it waits on the lock
    # (then the hold commits under it: exactly the race the lock must win).
    wait_for(
        lambda: not sweeper.is_alive() or _blocked_on_a_lock(holder),
        timeout=10,
        message="the sweep to finish or block",
    )
    holder.commit()
    holder.close()
    sweeper.join(timeout=10)

    assert Run.objects.filter(pk="old", legal_hold=True).exists(), "a held run was deleted"
    assert [s.runs_affected for s in sweeps] == [0]
