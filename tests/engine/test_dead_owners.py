"""A running run whose executor process's Postgres liveness session is gone has a dead
owner: the sweeper expires its lease at once instead of waiting out the TTL
(invariant 7). One session per process covers all the runs it executes."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone

from durableruns.engine import executor, liveness, runs, store
from durableruns.engine.runs import start_run
from durableruns.models import Run
from tests.conftest import database_dsn, wait_for
from tests.web.dashboard import make_run, run_row

pytestmark = pytest.mark.django_db(transaction=True)

ELSEWHERE = "elsewhere:1:x"  # another worker process's owner id


def _running(run_id: str, process: str = ELSEWHERE) -> store.Lease:
    start_run("t-sleepy", {"seconds": 30}, run_id=run_id)
    lease = store.acquire_lease(run_id, f"{process}/{run_id}")
    assert lease is not None
    return lease


def _process_session(process: str = ELSEWHERE) -> psycopg.Connection:
    """Another worker process's liveness session, holding its lock."""
    session = psycopg.connect(database_dsn(), autocommit=True)
    session.execute("SELECT pg_advisory_lock(%s)", [store.process_lock_key(process)])
    return session


def _liveness_sessions() -> int:
    """Sessions holding an advisory lock keyed by this process's owner id."""
    key = store.process_lock_key(liveness.current().owner) & 0xFFFFFFFFFFFFFFFF
    with psycopg.connect(database_dsn(), autocommit=True) as other:
        rows = other.execute(
            "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objid = %s AND objsubid = 1",
            [key >> 32, key & 0xFFFFFFFF],
        ).fetchone()
    return rows[0]


def test_it_leaves_a_run_whose_owner_session_is_alive(rung):
    _running("alive")
    with _process_session():
        assert store.take_over_dead_owners() == []
        assert executor.advance("alive") == "skipped"
    assert Run.objects.get(pk="alive").lease_expires_at is not None


def test_it_expires_every_run_of_a_process_as_soon_as_its_session_closes(rung):
    leases = [_running("dead-1"), _running("dead-2"), _running("dead-3")]
    _running("other", process="living:2:y")
    session = _process_session()
    with _process_session("living:2:y"):
        session.close()  # what the kernel does for a SIGKILLed worker

        # The server ends the session a moment after the client hangs up.
        dead = wait_for(store.take_over_dead_owners, timeout=5)
    assert sorted(dead) == ["dead-1", "dead-2", "dead-3"]
    assert rung.count("dead-1") == 2, "rung when started, and again when taken over"
    assert executor.advance("dead-1") in {"waiting", Run.Status.WAITING}
    assert Run.objects.get(pk="dead-1").fence > leases[0].fence, "a new fence"
    assert Run.objects.get(pk="other").lease_expires_at > timezone.now()


def test_it_ignores_the_dead_owner_signal_when_turned_off(rung, settings):
    settings.DURABLERUNS_DEAD_OWNER_DETECTION = False
    _running("pooled")
    assert store.take_over_dead_owners() == []
    assert Run.objects.get(pk="pooled").status == Run.Status.RUNNING


def test_it_leaves_an_owner_naming_no_process_to_the_lease_ttl(rung):
    """A worker of an earlier release owns leases by run, not by process."""
    start_run("t-sleepy", {"seconds": 30}, run_id="legacy")
    assert store.acquire_lease("legacy", "host:1:abcdef12") is not None
    assert store.take_over_dead_owners() == []


def test_many_runs_of_one_process_hold_one_liveness_session(rung):
    for run_id in ("a", "b", "c"):
        start_run("t-sleepy", {"seconds": 30}, run_id=run_id)
    with (
        liveness.executing(lambda owner: store.acquire_lease("a", owner)) as a,
        liveness.executing(lambda owner: store.acquire_lease("b", owner)) as b,
        liveness.executing(lambda owner: store.acquire_lease("c", owner)) as c,
    ):
        assert a and b and c
        owners = {lease.owner.rpartition("/")[0] for lease in (a, b, c)}
        assert owners == {liveness.current().owner}
        assert _liveness_sessions() == 1
        assert store.take_over_dead_owners() == []
        assert len(liveness.current().held()) == 3
    assert liveness.current().held() == []


def test_a_finished_executor_leaves_the_process_lock_held_and_no_lease(rung):
    start_run("t-sleepy", {"seconds": 30}, run_id="done")
    executor.advance("done")
    assert liveness.current().held() == []
    assert _liveness_sessions() == 1
    liveness.close()
    assert wait_for(lambda: _liveness_sessions() == 0, timeout=5)


def test_it_renews_every_held_lease_in_one_beat_and_marks_a_lost_one(rung):
    leases = [_running("r1"), _running("r2")]
    Run.objects.filter(pk="r2").update(lease_owner="someone-else/1")
    store.renew_leases(leases)
    assert not leases[0].lost
    assert leases[1].lost


def test_it_never_renews_a_lease_that_expired(rung):
    """A hung process waking up must not extend a lease another may hold now."""
    lease = _running("late")
    Run.objects.filter(pk="late").update(lease_expires_at=timezone.now())
    store.renew_leases([lease])
    assert lease.lost


def test_it_takes_over_from_a_hung_owner_once_the_lease_expires(rung):
    """A hung (SIGSTOPped, partitioned) process keeps its session and its lock: the
    lease TTL is the fallback, and the lock must not keep the next executor out."""
    lease = _running("hung")
    with _process_session():
        assert store.take_over_dead_owners() == []
        Run.objects.filter(pk="hung").update(lease_expires_at=timezone.now())
        assert executor.advance("hung") == Run.Status.WAITING
    assert Run.objects.get(pk="hung").fence > lease.fence


def test_a_dead_process_is_found_among_a_fleets_live_runs(rung):
    """The sweep looked at the owners of the first 500 live runs only, so a process that
    died while others held more than that (a fleet: 5 workers of 200 runs) waited out
    the TTL, or for the others' runs to end, before its runs were taken over."""
    soon = timezone.now() + timezone.timedelta(seconds=30)
    live = {"status": Run.Status.RUNNING, "agent": "t-sleepy", "lease_expires_at": soon}
    Run.objects.bulk_create(
        run_row(f"busy-{i:04d}", lease_owner=f"living:2:y/{i:04d}", **live) for i in range(1_200)
    )
    later = soon + timezone.timedelta(seconds=1)
    # Inserted last and expiring last: past the first 500 rows in any order read.
    make_run("orphan", lease_owner=f"{ELSEWHERE}/orphan", **(live | {"lease_expires_at": later}))
    with _process_session("living:2:y"):
        assert store.take_over_dead_owners() == ["orphan"]
        assert store.take_over_dead_owners() == []
    assert Run.objects.filter(lease_expires_at=soon).count() == 1_200


def test_the_sweep_leader_rings_again_what_a_dead_process_may_have_taken(rung, leader_tick):
    """A doorbell a worker had taken and not yet acted on dies with it (the broker keeps
    no copy): once the worker's death is noticed, every run still waiting for a worker
    is rung again, not after DURABLERUNS_REDELIVER_AFTER (test_lost_doorbell.py kills
    a real worker there)."""
    _running("dead-1")
    start_run("t-sleepy", {"seconds": 30}, run_id="queued")  # rung, taken by nobody yet
    _process_session().close()  # the dead worker's liveness session

    def taken_over() -> bool:
        leader_tick()
        return rung.count("dead-1") == 2

    wait_for(taken_over, timeout=5)
    assert rung.count("queued") == 2, "rung when started, and again when the death was seen"
    assert rung.count("dead-1") == 2, "the taken-over run is rung once, by the take-over"
    leader_tick()
    assert rung.count("queued") == 2, "only when a death is noticed"


def test_after_a_death_the_longest_rung_runs_are_rung_first(rung):
    """A lost doorbell was nearest the head of its queue: with more runs waiting than one
    batch, the re-ring after a death takes the longest rung."""
    now = timezone.now()
    for age in (5, 60, 20):
        make_run(f"waiting-{age}", status=Run.Status.QUEUED, rang_at=now - timedelta(seconds=age))
    assert runs.ring_due(batch=1, redeliver_after=0, oldest_first=True) == 1
    assert rung == ["waiting-60"]
