"""A running run whose executor's Postgres session is gone has a dead owner: the
sweeper expires its lease at once instead of waiting out the TTL (invariant 7)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from durableruns.engine import executor, store
from durableruns.engine.runs import start_run
from durableruns.models import Run
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _dsn() -> str:
    db = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"]
    )


def _running(run_id: str) -> store.Lease:
    start_run("t-sleepy", {"seconds": 30}, run_id=run_id)
    lease = store.acquire_lease(run_id, "elsewhere:1:x")
    assert lease is not None
    return lease


def _executor_session(run_id: str) -> psycopg.Connection:
    """Another process's executor connection, holding the run's liveness lock."""
    session = psycopg.connect(_dsn(), autocommit=True)
    session.execute("SELECT pg_advisory_lock(%s)", [store.run_lock_key(run_id)])
    return session


def test_it_leaves_a_run_whose_owner_session_is_alive(rung):
    _running("alive")
    with _executor_session("alive"):
        assert store.take_over_dead_owners() == []
        assert executor.advance("alive") == "skipped"
    assert Run.objects.get(pk="alive").lease_expires_at is not None


def test_it_expires_the_lease_as_soon_as_the_owner_session_closes(rung):
    lease = _running("dead")
    session = _executor_session("dead")
    session.close()  # what the kernel does for a SIGKILLed worker

    # The server ends the session a moment after the client hangs up.
    assert wait_for(store.take_over_dead_owners, timeout=5) == ["dead"]
    assert rung == ["dead", "dead"], "rung when started, and again when taken over"
    assert executor.advance("dead") in {"waiting", Run.Status.WAITING}
    run = Run.objects.get(pk="dead")
    assert run.fence > lease.fence, "the next executor took over with a new fence"


def test_it_ignores_the_dead_owner_signal_when_turned_off(rung, settings):
    settings.DURABLERUNS_DEAD_OWNER_DETECTION = False
    _running("pooled")
    assert store.take_over_dead_owners() == []
    assert Run.objects.get(pk="pooled").status == Run.Status.RUNNING


def test_a_finished_executor_leaves_its_lock_free(rung):
    start_run("t-sleepy", {"seconds": 30}, run_id="done")
    executor.advance("done")
    with psycopg.connect(_dsn(), autocommit=True) as other:
        key = store.run_lock_key("done")
        assert other.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]


def test_it_takes_over_from_a_hung_owner_once_the_lease_expires(rung):
    """A hung (SIGSTOPped, partitioned) owner keeps its session and its lock: the lease
    TTL is the fallback, and the lock must not keep the next executor out."""
    lease = _running("hung")
    with _executor_session("hung"):
        assert store.take_over_dead_owners() == []
        Run.objects.filter(pk="hung").update(lease_expires_at=timezone.now())
        assert executor.advance("hung") == Run.Status.WAITING
    assert Run.objects.get(pk="hung").fence > lease.fence


def test_a_doorbell_that_loses_the_lock_race_never_takes_the_lease(rung):
    """Another worker's duplicate doorbell holds the lock for an instant: this one must
    not take the lease without the lock (the sweeper would read it as dead)."""
    start_run("t-sleepy", {"seconds": 30}, run_id="raced")
    with _executor_session("raced"):  # the competing doorbell's executor, mid-claim
        assert store.claim_owner_lock("raced") == store.LOCK_BUSY
    assert Run.objects.get(pk="raced").status == Run.Status.QUEUED
