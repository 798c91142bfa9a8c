"""One worker started as documented (thread pool, pooled sessions) holds 200 runs in
flight, each waiting in a step: they cost threads, not sessions (invariant 17), and a
SIGKILL of that worker loses none and repeats nothing (invariants 2, 7, 13)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from durableruns.engine.runs import start_run
from durableruns.models import Run
from tests.chaos import fleet_agents
from tests.conftest import Processes, database_dsn, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

IN_FLIGHT = 200
POOL_SIZE = 10
APP = "durableruns-fleet-worker"  # libpq's PGAPPNAME: finds this test's worker sessions
LEASE_TTL = 30.0  # the production default: dead-owner detection must beat it by far
# The documented worker (README, "Deployment"): threads, and a bounded pool of sessions;
# and the opt-in one with the same pool, greenlets instead of threads ("Sizing workers").
WORKERS = {"threads": {"pool": "threads", "concurrency": 1024}}
WORKERS["gevent"] = {**WORKERS["threads"], "pool": "gevent"}


@pytest.fixture
def fleet(processes: Processes, tmp_path: Path) -> dict[str, Path]:
    processes.env.update(
        {
            "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.chaos.fleet_agents",
            "DURABLERUNS_DB_POOL_SIZE": str(POOL_SIZE),
            "DURABLERUNS_LEASE_TTL": str(LEASE_TTL),
            "PGAPPNAME": APP,
        }
    )
    return {"ledger": tmp_path / "ledger", "gate": tmp_path / "gate", "effects": tmp_path / "fx"}


def _start_runs(files: dict[str, Path]) -> list[str]:
    run_ids = []
    for i in range(IN_FLIGHT):
        agent, extra, _ = fleet_agents.MIX[i % len(fleet_agents.MIX)]
        run_id = f"fleet-{i:03d}"
        task = {**{k: str(v) for k, v in files.items()}, "name": run_id, **extra}
        start_run(agent, task, run_id=run_id)
        run_ids.append(run_id)
    return run_ids


def _waiting(ledger: Path) -> dict[str, int]:
    """Run id -> pid of the process it last waited in."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return {run_id: int(pid) for _, run_id, pid in (line.split() for line in lines)}


def _worker_sessions() -> list[tuple]:
    """The worker's sessions: (pid, started, state, the start of their last query), so a
    failure says which session was one too many (a serial run once saw 13 of 12)."""
    db = connection.settings_dict
    with psycopg.connect(database_dsn(), autocommit=True) as admin:
        return admin.execute(
            "SELECT pid, backend_start::time, state, left(query, 80) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = %s ORDER BY backend_start",
            [db["NAME"], APP],
        ).fetchall()


def _all_in_flight(files: dict[str, Path], pid: int) -> bool:
    waiting = _waiting(files["ledger"])
    return sum(1 for p in waiting.values() if p == pid) == IN_FLIGHT


def _assert_nothing_repeated_or_lost(run_ids: list[str], files: dict[str, Path]) -> None:
    executed = fleet_agents.executions(files["effects"])
    expected = {
        f"fleet-{i:03d}": fleet_agents.MIX[i % len(fleet_agents.MIX)][2] for i in range(IN_FLIGHT)
    }
    duplicates = {r: c - expected[r] for r, c in executed.items() if c - expected[r]}
    lost = {
        r: expected[r] - executed.get(r, Counter())
        for r in run_ids
        if expected[r] - executed.get(r, Counter())
    }
    assert (duplicates, lost) == ({}, {})
    statuses = Counter(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))
    assert statuses == {Run.Status.SUCCEEDED: IN_FLIGHT}


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_200_runs_waiting_in_steps_hold_only_the_pool_and_the_liveness_session(
    fleet, processes, kind
):
    worker = processes.worker(**WORKERS[kind])
    run_ids = _start_runs(fleet)
    wait_for(lambda: _all_in_flight(fleet, worker.pid), timeout=180, message="200 runs in flight")
    # The pool, the process's liveness session and its sweeper thread's: not one per run.
    peak = max((_worker_sessions() for _ in range(10)), key=len)
    assert len(peak) <= POOL_SIZE + 2, "\n".join(map(str, peak))
    fleet["gate"].touch()
    wait_for(
        lambda: Run.objects.filter(pk__in=run_ids, status__in=Run.TERMINAL).count() == IN_FLIGHT,
        timeout=180,
        message="every run to finish",
    )
    _assert_nothing_repeated_or_lost(run_ids, fleet)


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_a_sigkilled_worker_with_200_runs_in_flight_loses_and_repeats_nothing(
    fleet, processes, kind
):
    doomed = processes.worker(**WORKERS[kind], name="doomed")
    run_ids = _start_runs(fleet)
    wait_for(lambda: _all_in_flight(fleet, doomed.pid), timeout=180, message="200 runs in flight")
    # A worker consuming another queue: it sweeps (and so detects the dead owner) but
    # executes nothing, so detection is timed apart from the start of the next worker.
    sweeper = processes.worker(name="sweeper", queue=f"{processes.env['DURABLERUNS_QUEUE']}-idle")
    log = processes.log_dir / f"sweeper-{processes.procs.index(sweeper)}.log"
    wait_for(lambda: b" ready." in log.read_bytes(), message="the sweeping worker")
    # What the doomed worker executes: a parent's child, not the parent, which waits
    # for it holding no lease.
    executing = list(Run.objects.filter(status=Run.Status.RUNNING).values_list("pk", flat=True))
    assert len(executing) == IN_FLIGHT
    assert Run.objects.filter(pk__in=run_ids, status=Run.Status.AWAITING_CHILD).exists()
    killed_at = time.time()
    processes.kill(doomed)

    def rung_after_kill() -> list[float]:
        rung = Run.objects.filter(pk__in=executing, rang_at__gt=_at(killed_at)).values_list(
            "rang_at", flat=True
        )
        times = [at.timestamp() - killed_at for at in rung]
        return times if len(times) == IN_FLIGHT else []

    detected = wait_for(
        rung_after_kill, timeout=LEASE_TTL, message="the dead owner's runs to be rung"
    )
    print(
        f"\n200 runs' dead owner detected {min(detected):.2f}-{max(detected):.2f} s after SIGKILL"
    )
    assert max(detected) < LEASE_TTL / 5, "detected through the process's session, not the TTL"
    fleet["gate"].touch()
    processes.worker(**WORKERS[kind], name="successor")
    wait_for(
        lambda: Run.objects.filter(pk__in=run_ids, status__in=Run.TERMINAL).count() == IN_FLIGHT,
        timeout=240,
        message="every run to finish",
    )
    _assert_nothing_repeated_or_lost(run_ids, fleet)
    resumed = {run_id for run_id, pid in _waiting(fleet["ledger"]).items() if pid != doomed.pid}
    assert resumed == set(run_ids), "every run waited again in the successor"


def _at(unix: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(unix, tz=UTC)
