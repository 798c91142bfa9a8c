"""Infrastructure faults under real Celery workers: each test asserts an invariant of
ARCHITECTURE.md section 2 (6: one executor per run; 7: Postgres is the truth, Redis
is a doorbell; 4 and 5: no effect executed twice).

Tests that abuse Redis start their own redis-server on a free port: the shared
Redis at 6379 is never flushed or restarted.
"""

from __future__ import annotations

import signal
import socket
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from django.db.models import Count

import tests.agents  # noqa: F401 - registers the test agents in this process too
from durableruns.celery import app
from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Run, Step
from durableruns.tasks import advance_run
from tests.conftest import (
    TEST_LEASE_TTL,
    TEST_SWEEP_INTERVAL,
    Processes,
    database_dsn,
    terminate_backends,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

AGENT_MODULES = "durableruns.demo.agents,tests.agents"
# Workers connect to Postgres under this name (libpq reads PGAPPNAME), so a test can
# find their backends in pg_stat_activity without touching anyone else's.
WORKER_APP = "durableruns-fault-worker"
REFUND = {"order_id": "A-1001", "payments": "dedupe", "email": "dedupe"}


# --- Fixtures ----------------------------------------------------------------


@pytest.fixture
def faults(processes: Processes) -> Processes:
    processes.env["DURABLERUNS_AGENT_MODULES"] = AGENT_MODULES
    processes.env["PGAPPNAME"] = WORKER_APP
    return processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    """A throw-away redis-server of this test's own, safe to flush and restart."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self.answers, timeout=10, message="the private redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.ConnectionError:
            return False


def _point_celery_at(url: str) -> None:
    """Publish this process's doorbells to `url` (drop pooled connections to the old one)."""
    app.conf.broker_url = url
    app._pool = None  # Celery caches its pools per broker
    app.amqp._producer_pool = None


@pytest.fixture
def private_redis(faults: Processes, tmp_path: Path) -> Iterator[PrivateRedis]:
    workdir = tmp_path / "redis"
    workdir.mkdir()
    server = PrivateRedis(workdir)
    server.start()
    shared = app.conf.broker_url
    faults.env["REDIS_URL"] = server.url
    _point_celery_at(server.url)
    yield server
    faults.stop_all()
    server.stop()
    _point_celery_at(shared)


# --- Observations --------------------------------------------------------------


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _all_finished(run_ids: list[str]) -> bool:
    return not Run.objects.filter(pk__in=run_ids).exclude(status__in=Run.TERMINAL).exists()


def _unfinished(run_ids: list[str]) -> int:
    return Run.objects.filter(pk__in=run_ids).exclude(status__in=Run.TERMINAL).count()


def _fence(run_id: str) -> int:
    return Run.objects.values_list("fence", flat=True).get(pk=run_id)


def _executions(run_id: str) -> Counter:
    """Real provider executions per step and tool (arguments may embed run ids)."""
    rows = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run_id}:", outcome=ProviderCall.Outcome.EXECUTED
    )
    keys = rows.values_list("idempotency_key", flat=True)
    return Counter(":".join(key.split(":")[1:3]) for key in keys)


def _model_calls(run_id: str) -> Counter:
    rows = ModelCall.objects.filter(idempotency_key__startswith=f"{run_id}:")
    return Counter(rows.values_list("step", flat=True))


def _uninterrupted(agent: str, run_input: dict, run_id: str = "baseline") -> Counter:
    start_run(agent, run_input, run_id=run_id)
    wait_for(lambda: _all_finished([run_id]), message=f"the uninterrupted run {run_id}")
    assert _status(run_id) == Run.Status.SUCCEEDED
    return _executions(run_id)


def _assert_checkpointed_once(run_id: str) -> None:
    """Every position holds exactly one step, positions 0..n-1, and n steps were used."""
    per_position = (
        Step.objects.filter(run_id=run_id)
        .values("position")
        .annotate(n=Count("id"))
        .order_by("position")
    )
    positions = [row["position"] for row in per_position]
    assert all(row["n"] == 1 for row in per_position), list(per_position)
    assert positions == list(range(len(positions)))
    assert Run.objects.get(pk=run_id).steps_used == len(positions)


def _assert_same_effects(run_ids: list[str], baseline: Counter) -> None:
    assert baseline and set(baseline.values()) == {1}
    for run_id in run_ids:
        run = Run.objects.get(pk=run_id)
        assert run.status == Run.Status.SUCCEEDED, (run_id, run.status, run.error)
        assert _executions(run_id) == baseline, run_id
        _assert_checkpointed_once(run_id)


def _ledger(path: Path) -> list[tuple[str, int, int, float]]:
    """(event, position, pid, unix time) for every slow step started or ended."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        event, position, pid, at = line.split()
        rows.append((event, int(position), int(pid), float(at)))
    return rows


def _executors(path: Path, position: int) -> list[int]:
    return [pid for event, pos, pid, _ in _ledger(path) if event == "start" and pos == position]


def _log(processes: Processes, proc: subprocess.Popen) -> str:
    path = processes.log_dir / f"worker-{processes.procs.index(proc)}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _ready(processes: Processes, proc: subprocess.Popen) -> bool:
    return " ready." in _log(processes, proc)


def _worker_by_pid(processes: Processes, pid: int) -> subprocess.Popen:
    return next(proc for proc in processes.procs if proc.pid == pid)


# --- Redis: a doorbell, never the truth (invariant 7) -------------------------


def test_it_loses_no_run_when_redis_is_flushed_mid_runs(faults, private_redis):
    faults.worker()
    faults.worker()
    faults.beat()
    baseline = _uninterrupted("refund-bot", REFUND)
    run_ids = [start_run("refund-bot", REFUND, run_id=f"flush-{n}")[0].id for n in range(20)]
    wait_for(
        lambda: Step.objects.filter(run_id__in=run_ids).count() >= 8,
        message="the runs to get going",
    )
    in_flight = _unfinished(run_ids)
    private_redis.client().flushall()

    assert in_flight >= 5, "the flush must hit runs that had not finished"
    wait_for(lambda: _all_finished(run_ids), timeout=120, message="every run to finish")
    _assert_same_effects(run_ids, baseline)
    for run_id in run_ids:
        assert set(_model_calls(run_id).values()) == {1}


def test_it_loses_no_run_when_redis_restarts_mid_runs(faults, private_redis):
    faults.worker()
    faults.worker()
    faults.beat()
    baseline = _uninterrupted("refund-bot", REFUND)
    run_ids = [start_run("refund-bot", REFUND, run_id=f"restart-{n}")[0].id for n in range(12)]
    wait_for(
        lambda: Step.objects.filter(run_id__in=run_ids).count() >= 5,
        message="the runs to get going",
    )
    in_flight = _unfinished(run_ids)
    before = private_redis.client().info("server")["run_id"]
    private_redis.stop()  # SIGKILL: no save, everything queued in Redis is gone
    private_redis.start()

    assert in_flight >= 3, "the restart must hit runs that had not finished"
    assert private_redis.client().info("server")["run_id"] != before, "a new Redis process"
    wait_for(lambda: _all_finished(run_ids), timeout=120, message="every run to finish")
    _assert_same_effects(run_ids, baseline)


def test_it_starts_runs_while_redis_is_down_and_finishes_them_later(faults, private_redis):
    faults.worker()
    faults.beat()
    baseline = _uninterrupted("refund-bot", REFUND)
    private_redis.stop()
    began = time.monotonic()
    run_ids = [start_run("refund-bot", REFUND, run_id=f"down-{n}")[0].id for n in range(3)]
    took = time.monotonic() - began

    assert took < 15, f"starting 3 runs with Redis down took {took:.1f}s"
    assert set(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True)) == {
        Run.Status.QUEUED
    }
    private_redis.start()
    wait_for(lambda: _all_finished(run_ids), timeout=120, message="every run to finish")
    _assert_same_effects(run_ids, baseline)


# --- Postgres connections killed while a result commits -------------------------


_BLOCKED_RESULT_COMMIT = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND application_name = %s AND wait_event_type = 'Lock'
      AND query LIKE 'UPDATE durableruns_effect SET state%%'
"""


def _kill_during_result_commit(
    admin: psycopg.Connection, killed: set[str], run_ids: list[str]
) -> None:
    """Hold an in-flight effect row locked until its worker blocks committing the
    result, then terminate that worker's backend in the middle of the commit."""
    with psycopg.connect(database_dsn()) as locker:
        row = locker.execute(
            "SELECT idempotency_key FROM durableruns_effect WHERE run_id = ANY(%s) "
            "AND tool = 'slow_refund' AND state = 'started' AND NOT idempotency_key = ANY(%s) "
            "FOR UPDATE SKIP LOCKED LIMIT 1",
            (run_ids, list(killed)),
        ).fetchone()
        if row is None:
            return
        blocked = wait_for(
            lambda: admin.execute(_BLOCKED_RESULT_COMMIT, (WORKER_APP,)).fetchall(),
            timeout=10,
            message="a worker blocked in its result commit",
        )
        terminate_backends(admin, blocked)
        killed.add(row[0])
        locker.rollback()


def test_it_finishes_runs_whose_result_commit_lost_its_connection(faults):
    faults.worker()
    faults.worker()
    faults.beat()
    run_input = {"order_id": "A-1001", "pause": 0.3}
    baseline = _uninterrupted("slow-refund-bot", run_input)
    run_ids = [
        start_run("slow-refund-bot", run_input, run_id=f"pgkill-{n}")[0].id for n in range(6)
    ]
    killed: set[str] = set()
    deadline = time.monotonic() + 90
    with psycopg.connect(database_dsn(), autocommit=True) as admin:
        while not _all_finished(run_ids) and time.monotonic() < deadline:
            _kill_during_result_commit(admin, killed, run_ids)

    assert len(killed) >= 3, f"only {len(killed)} result commits were interrupted"
    wait_for(lambda: _all_finished(run_ids), timeout=60, message="every run to finish")
    _assert_same_effects(run_ids, baseline)


_ACTIVE_WORKER_BACKENDS = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND application_name = %s AND state IN ('active', 'idle in transaction')
"""


def test_it_finishes_runs_whose_worker_connections_keep_dying(faults):
    faults.worker()
    faults.worker()
    faults.beat()
    baseline = _uninterrupted("refund-bot", REFUND)
    run_ids = [start_run("refund-bot", REFUND, run_id=f"pgchurn-{n}")[0].id for n in range(10)]
    kills = 0
    deadline = time.monotonic() + 60
    with psycopg.connect(database_dsn(), autocommit=True) as admin:
        while kills < 30 and not _all_finished(run_ids) and time.monotonic() < deadline:
            busy = wait_for(
                lambda: (
                    admin.execute(_ACTIVE_WORKER_BACKENDS, (WORKER_APP,)).fetchall()
                    or _all_finished(run_ids)
                ),
                interval=0.005,
                timeout=30,
                message="a worker backend in the middle of a statement",
            )
            kills += terminate_backends(admin, busy if isinstance(busy, list) else [])

    assert kills >= 10, f"only {kills} worker connections were killed"
    wait_for(lambda: _all_finished(run_ids), timeout=90, message="every run to finish")
    # Effects are exactly-once; a model reply whose checkpoint died with its connection
    # is at-least-once (the call happened, its record did not), so it is not counted.
    _assert_same_effects(run_ids, baseline)


_IDLE_POOLED_BACKENDS = """
    SELECT pid FROM pg_stat_activity a
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND application_name = %s AND state = 'idle'
      AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')
"""


def _family(run_id: str) -> list[str]:
    """The run and its child runs, their children too."""
    family, frontier = [run_id], [run_id]
    while frontier:
        frontier = list(Run.objects.filter(parent_run_id__in=frontier).values_list("id", flat=True))
        family += frontier
    return family


def _family_executions(run_id: str) -> Counter:
    """Real provider executions per run of the family (named relative to `run_id`, so
    ".c0" is the first child), step and tool."""
    return Counter(
        {
            (member[len(run_id) :], *key.split(":")): count
            for member in _family(run_id)
            for key, count in _executions(member).items()
        }
    )


@pytest.mark.parametrize(
    ("agent", "run_input"),
    [
        ("refund-bot", REFUND),  # a native agent's steps and effects
        ("triage-bot", {"question": "Where is my refund?"}),  # a reply's tool calls, in parallel
        ("refund-desk", {"order_ids": ["A-1001", "A-1003"]}),  # two child runs
    ],
)
@pytest.mark.parametrize("pool", ["threads", "gevent"])  # documented; opt-in
def test_it_finishes_runs_whose_pooled_connections_die_between_statements(
    faults, agent, run_input, pool
):
    """Pooled connections killed while they sit in the pool, whether the pool's check
    (after a second unused, durableruns/dbpool.py) or the run's next statement finds
    them broken: the run is handed back and resumed, never repeated."""
    pooled = {"DURABLERUNS_DB_POOL_SIZE": "4"}
    workers = [faults.worker(pool=pool, concurrency=8, extra_env=pooled) for _ in range(2)]
    _uninterrupted(agent, run_input)
    baseline = _family_executions("baseline")
    run_ids = [start_run(agent, run_input, run_id=f"pooldie-{n}")[0].id for n in range(6)]
    kills = 0
    deadline = time.monotonic() + 60
    with psycopg.connect(database_dsn(), autocommit=True) as admin:
        while kills < 30 and not _all_finished(run_ids) and time.monotonic() < deadline:
            kills += terminate_backends(
                admin, admin.execute(_IDLE_POOLED_BACKENDS, (WORKER_APP,)).fetchall()
            )
            time.sleep(0.02)  # the cadence of the kills, not a wait for something

    assert kills >= 10, f"only {kills} pooled connections were killed"
    wait_for(lambda: _all_finished(run_ids), timeout=90, message="every run to finish")
    assert baseline and set(baseline.values()) == {1}
    for run_id in run_ids:
        for member in _family(run_id):
            assert _status(member) == Run.Status.SUCCEEDED, member
            _assert_checkpointed_once(member)
        assert _family_executions(run_id) == baseline, run_id
    handed_back = sum(_log(faults, w).count("handing the run back") for w in workers)
    assert handed_back, "no statement met a connection killed in the pool"


# --- One executor per run (invariant 6) -------------------------------------------


def _turned_away(processes: Processes) -> int:
    """Doorbells a worker answered without executing (the run was leased or done)."""
    return sum(_log(processes, proc).count("'skipped'") for proc in processes.procs)


def test_it_executes_a_run_enqueued_five_times_at_once_once(faults):
    workers = [faults.worker() for _ in range(3)]
    wait_for(lambda: all(_ready(faults, w) for w in workers), message="every worker")
    baseline = _uninterrupted("refund-bot", REFUND)
    skipped_before = _turned_away(faults)
    start_run("refund-bot", REFUND, run_id="five")
    for _ in range(4):
        advance_run.apply_async(("five",))

    wait_for(lambda: _all_finished(["five"]), message="the run to finish")
    wait_for(
        lambda: _turned_away(faults) - skipped_before == 4,
        message="the four extra doorbells to be turned away",
    )
    assert _fence("five") == 1, "exactly one lease was ever taken"
    _assert_same_effects(["five"], baseline)
    assert _model_calls("five") == _model_calls("baseline")
    assert set(_model_calls("five").values()) == {1}


def test_it_never_lets_two_workers_execute_the_same_step(faults, tmp_path):
    workers = [faults.worker(), faults.worker()]
    wait_for(lambda: all(_ready(faults, w) for w in workers), message="both workers")
    ledger = tmp_path / "ledger"
    steps = 6
    start_run(
        "slow-bot", {"ledger": str(ledger), "steps": steps, "seconds": 0.3}, run_id="contended"
    )
    for _ in range(10):
        advance_run.apply_async(("contended",))
    wait_for(lambda: _executors(ledger, 2), message="the run to reach its third step")
    for _ in range(10):
        advance_run.apply_async(("contended",))

    wait_for(lambda: _all_finished(["contended"]), message="the run to finish")
    assert _status("contended") == Run.Status.SUCCEEDED
    assert [len(_executors(ledger, position)) for position in range(steps)] == [1] * steps
    assert _turned_away(faults) >= 1, "no worker was given the run while it was leased"
    _assert_checkpointed_once("contended")


def test_it_rejects_a_paused_workers_late_writes(faults, tmp_path):
    workers = [faults.worker(), faults.worker()]
    faults.beat()
    task = {"steps": 2, "seconds": 1.0, "refund": "none"}
    baseline = _uninterrupted(
        "slow-bot", {**task, "seconds": 0.05, "ledger": str(tmp_path / "baseline")}
    )
    ledger = tmp_path / "ledger"
    start_run("slow-bot", {**task, "ledger": str(ledger)}, run_id="paused")
    zombie_pid = wait_for(lambda: _executors(ledger, 0), message="the first step")[0]
    zombie = _worker_by_pid(faults, zombie_pid)
    fence = _fence("paused")
    faults.kill(zombie, signal.SIGSTOP)
    try:
        wait_for(lambda: _fence("paused") > fence, message="another worker to take over")
        wait_for(lambda: _all_finished(["paused"]), message="the run to finish without it")
    finally:
        faults.kill(zombie, signal.SIGCONT)
    wait_for(lambda: "'lease-lost'" in _log(faults, zombie), message="the zombie to give up")

    survivor = next(w for w in workers if w is not zombie)
    assert _executors(ledger, 0) == [zombie_pid, survivor.pid]
    assert ("end", 0, zombie_pid) in [row[:3] for row in _ledger(ledger)], "it did wake up"
    assert Step.objects.get(run_id="paused", position=0).result == {"pid": survivor.pid}
    assert _executors(ledger, 1) == [survivor.pid], "the zombie started nothing after waking"
    _assert_same_effects(["paused"], baseline)


# --- The sweeper picks up an expired lease (invariant 7) ---------------------------


def test_it_picks_up_an_expired_lease_within_ttl_plus_sweep_interval(faults, tmp_path):
    """The fallback path: with dead-owner detection off, only the lease TTL hands over."""
    kills = 6
    faults.env["DURABLERUNS_DEAD_OWNER_DETECTION"] = "0"
    # One idle worker per kill, started up front: worker start-up is not pick-up time.
    workers = [faults.worker() for _ in range(kills + 1)]
    faults.beat()
    wait_for(lambda: all(_ready(faults, w) for w in workers), message="every worker")
    ledger = tmp_path / "ledger"
    start_run(
        "slow-bot", {"ledger": str(ledger), "steps": 3 * kills, "seconds": 0.25}, run_id="swept"
    )
    pickups, resumes = [], []
    for _ in range(kills):
        seen = len(_ledger(ledger))
        executor = wait_for(
            lambda n=seen: [pid for event, _, pid, _ in _ledger(ledger)[n:] if event == "start"],
            message="a step to start",
        )[0]
        fence = _fence("swept")
        killed_at, killed_wall = time.monotonic(), time.time()
        faults.kill(_worker_by_pid(faults, executor))
        wait_for(
            lambda f=fence: _fence("swept") > f,
            interval=0.01,
            timeout=15,
            message="the sweeper to hand the run to another worker",
        )
        pickups.append(time.monotonic() - killed_at)
        resumed = wait_for(
            lambda dead=executor, t=killed_wall: [
                at
                for event, _, pid, at in _ledger(ledger)
                if event == "start" and pid != dead and at > t
            ],
            interval=0.01,
            message="the next step to start",
        )
        resumes.append(resumed[0] - killed_wall)

    bound = TEST_LEASE_TTL + TEST_SWEEP_INTERVAL
    print(
        f"\nsweeper pick-up after SIGKILL (lease TTL {TEST_LEASE_TTL}s, sweep every "
        f"{TEST_SWEEP_INTERVAL}s, bound {bound}s): pick-up {_figures(pickups)}; "
        f"next step started {_figures(resumes)}"
    )
    assert max(pickups) < bound + 0.5, pickups
    wait_for(lambda: _all_finished(["swept"]), timeout=60, message="the run to finish")
    assert _status("swept") == Run.Status.SUCCEEDED
    _assert_checkpointed_once("swept")


def _figures(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(ordered):.2f}s, p95 {p95:.2f}s, max {ordered[-1]:.2f}s "
        f"over {len(ordered)} kills ({', '.join(f'{s:.2f}' for s in seconds)})"
    )
