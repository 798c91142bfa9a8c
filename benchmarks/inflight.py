"""In-flight capacity: N runs of 3 waits of 1 s each (no CPU, like runs waiting on a
model), all started at once, on one worker started the documented way (README,
"Sizing workers": `--pool=threads`, a pool of DURABLERUNS_DB_POOL_SIZE sessions), on
that section's opt-in gevent pool, and the same load on DBOS Transact (workflows in its
thread pool) and on LangGraph with AsyncPostgresSaver (asyncio, a pool of 20
connections), each in a process of its own.

Per system and size: wall time from the first start to the last finish (for
durableruns, from ringing the first run to the last run's committed finish); achieved
concurrency (the sum of the runs' durations over the wall time: the average number in
flight); peak Postgres sessions (pg_stat_activity, by application name, polled every
50 ms); peak RSS of the executing process (the Celery worker for durableruns); and
that process's CPU per run (user and system, all its threads) and context switches
per run over the measured part: where the wall time above the waits goes. Postgres's
own CPU is in no system's figure.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

from .common import (
    ROOT,
    admin_connect,
    create_database,
    db_url,
    libpq_url,
    rss_bytes,
    section_main,
    setup_django,
    workers,
)
from .throughput import create_runs, ring_all

WAITS, WAIT_SECONDS = 3, 1.0
SIZES = {"quick": (64, 512), "full": (64, 512, 1000)}
# The documented worker (docker-compose.yml, README "Sizing workers").
THREADS, POOL_SIZE = 1024, 20
APP = "durableruns-bench-inflight"  # libpq's PGAPPNAME for every system's sessions
PEER_POOL = 20


class Sampler(threading.Thread):
    """Polls one process's RSS and the sessions on one database (only those named
    `app`, when given: the benchmark's own Django session is on durableruns' database)."""

    def __init__(self, pids: list[int], database: str, app: str = "") -> None:
        super().__init__(daemon=True)
        self.pids, self.database, self.app = pids, database, app
        self.peak_rss = self.peak_sessions = 0
        self._stop = threading.Event()

    def run(self) -> None:
        with admin_connect() as admin:
            while not self._stop.wait(0.05):
                sessions = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND (%s = '' OR application_name = %s)",
                    [self.database, self.app, self.app],
                ).fetchone()[0]
                self.peak_sessions = max(self.peak_sessions, sessions)
                try:
                    self.peak_rss = max(self.peak_rss, sum(map(rss_bytes, self.pids)))
                except (OSError, RuntimeError):
                    return  # the process ended

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self.join(timeout=5)
        return {"peak_sessions": self.peak_sessions, "peak_rss_mib": self.peak_rss / 2**20}


def _figures(runs: int, wall: float, spans: list[tuple[float, float]]) -> dict[str, Any]:
    """`spans`: each run's (start, duration) in seconds: the start is when its first
    step began (durableruns: its lease taken; DBOS: its workflow's body; LangGraph:
    its first node), on any one clock."""
    starts = [start for start, _ in spans]
    return {
        "runs": runs,
        "wall_s": wall,
        "concurrency": sum(duration for _, duration in spans) / wall,
        "ideal_wall_s": WAITS * WAIT_SECONDS,
        # From the first run's start to the last's: how long the system took to take
        # every run up, competing with the runs it had already started.
        "start_spread_s": max(starts) - min(starts),
    }


def _usage(pids: list[int]) -> tuple[float, float, int]:
    """(user s, system s, context switches) of processes `pids`, all their threads:
    /proc/PID/stat sums the threads' CPU, the switches are the live threads' sum."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0.0
    switches = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        user, system = user + int(fields[11]) / tick, system + int(fields[12]) / tick
        for task in os.listdir(f"/proc/{pid}/task"):
            with suppress(OSError), open(f"/proc/{pid}/task/{task}/status") as status:
                switches += sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)
    return user, system, switches


def _cpu_figures(
    runs: int, before: tuple[float, float, int], after: tuple[float, float, int]
) -> dict[str, float]:
    user, system, switches = (b - a for a, b in zip(before, after, strict=True))
    return {
        "cpu_ms_per_run": (user + system) * 1000 / runs,
        "system_cpu_share": system / (user + system) if user + system else 0.0,
        "switches_per_run": switches / runs,
    }


# --- durableruns ------------------------------------------------------------------


def _durableruns(
    url: str, sizes: tuple[int, ...], processes: int = 1, celery_pool: str = "threads"
) -> list[dict[str, Any]]:
    """`processes` worker processes share the documented worker's threads and sessions:
    more than one is one per core (README, "Sizing workers"), RSS their sum.
    `celery_pool`: the documented threads, or the opt-in gevent."""
    from django.db.models import F, Max

    from durableruns.models import Run

    database = url.rsplit("/", 1)[1]
    results = []
    log_dir = Path(tempfile.mkdtemp(prefix="bench-inflight-"))
    env = {"DURABLERUNS_DB_POOL_SIZE": str(POOL_SIZE // processes), "PGAPPNAME": APP}
    with workers(url, log_dir, **env) as pool:
        started_workers = [
            pool.documented_worker(THREADS // processes, celery_pool) for _ in range(processes)
        ]
        pool.wait_ready(started_workers)
        warm = create_runs(
            16, "bench-waiter", {"waits": 1, "seconds": 0.01}, f"w-{uuid.uuid4().hex[:6]}"
        )
        # Rung from here like the measured runs: this process's first publish opens its
        # broker connection (about 80 ms), as each peer's warm-up runs open its own.
        ring_all(warm, pool.queue)
        _wait_done(warm[0][:-6], len(warm), timeout=60)
        for runs in sizes:
            prefix = f"if{runs}-{uuid.uuid4().hex[:8]}"
            run_ids = create_runs(
                runs, "bench-waiter", {"waits": WAITS, "seconds": WAIT_SECONDS}, prefix
            )
            pids = [worker.pid for worker in started_workers]
            sampler = Sampler(pids, database, APP)
            sampler.start()
            usage = _usage(pids)
            rang = time.time()  # the host's clock, which Postgres's timestamps are on
            ring_all(run_ids, pool.queue)
            _wait_done(prefix, runs, timeout=300)
            cpu = _cpu_figures(runs, usage, _usage(pids))
            peaks = sampler.stop()
            rows = Run.objects.filter(id__startswith=prefix)
            # Up to the last run's finish, as a peer's wall ends at its last result (not
            # at the poll that saw it, up to 50 ms later).
            wall = rows.aggregate(last=Max("finished_at"))["last"].timestamp() - rang
            spans = [
                (began.timestamp(), took.total_seconds())
                for began, took in rows.annotate(
                    took=F("finished_at") - F("started_at")
                ).values_list("started_at", "took")
                if began is not None
            ]
            results.append({**_figures(runs, wall, spans), **peaks, **cpu})
            print(
                f"durableruns {celery_pool} x{processes} {runs}: {results[-1]}",
                file=sys.stderr,
                flush=True,
            )
    return results


def _wait_done(prefix: str, runs: int, timeout: float) -> None:
    from durableruns.models import Run

    deadline = time.monotonic() + timeout
    mine = Run.objects.filter(id__startswith=prefix)
    while mine.filter(status__in=Run.TERMINAL).count() < runs:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{prefix}: runs unfinished after {timeout} s")
        time.sleep(0.05)
    if mine.exclude(status=Run.Status.SUCCEEDED).exists():
        raise RuntimeError(f"{prefix}: some runs did not succeed")


# --- Peers, each in a process of its own -------------------------------------------


def _peer(name: str, runs: int) -> dict[str, Any]:
    """Run peer `name` with `runs` runs in a subprocess; sample it from here."""
    database = f"{db_url('_inflight_' + name).rsplit('/', 1)[1]}"
    create_database(database)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peer.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.inflight", "--peer", name, str(runs), str(out)],
            cwd=ROOT,
        )
        sampler = Sampler([proc.pid], database)
        sampler.start()
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"peer {name} exited {proc.returncode}")
        peaks = sampler.stop()
        figures = json.loads(out.read_text())
    return {**figures, **peaks}


def _run_peer(name: str, runs: int, out: Path) -> None:
    url = libpq_url(db_url("_inflight_" + name))
    run = _dbos if name == "dbos" else _langgraph
    run(url, 8)  # warm up: connections, tables, imports
    usage = _usage([os.getpid()])
    started = time.perf_counter()
    spans = run(url, runs)
    wall = time.perf_counter() - started
    cpu = _cpu_figures(runs, usage, _usage([os.getpid()]))
    out.write_text(json.dumps({**_figures(runs, wall, spans), **cpu}))


_dbos_workflow: Any = None


def _dbos(url: str, runs: int) -> list[tuple[float, float]]:
    global _dbos_workflow
    from dbos import DBOS, DBOSConfig

    if _dbos_workflow is None:
        config: DBOSConfig = {
            "name": "durableruns-bench-inflight",
            "system_database_url": url,
            "log_level": "WARNING",
            "run_admin_server": False,
        }
        DBOS(config=config)

        @DBOS.step()
        def wait(seconds: float) -> None:
            time.sleep(seconds)

        @DBOS.workflow()
        def waiter() -> tuple[float, float]:
            began = time.perf_counter()
            for _ in range(WAITS):
                wait(WAIT_SECONDS)
            return began, time.perf_counter() - began

        _dbos_workflow = waiter
        DBOS.launch()
    handles = [DBOS.start_workflow(_dbos_workflow) for _ in range(runs)]
    return [tuple(handle.get_result()) for handle in handles]


def _langgraph(url: str, runs: int) -> list[tuple[float, float]]:
    return asyncio.run(_langgraph_runs(url, runs))


async def _langgraph_runs(url: str, runs: int) -> list[tuple[float, float]]:
    from typing import TypedDict

    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    class Waits(TypedDict):
        done: int
        began: float  # when the first node began: the run's first step, as ours

    async def wait(state: Waits) -> Waits:
        began = state["began"] or time.perf_counter()
        await asyncio.sleep(WAIT_SECONDS)
        return {"done": state["done"] + 1, "began": began}

    builder = StateGraph(Waits)
    previous = START
    for i in range(WAITS):
        builder.add_node(f"wait{i}", wait)
        builder.add_edge(previous, f"wait{i}")
        previous = f"wait{i}"
    builder.add_edge(previous, END)
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(url, max_size=PEER_POOL, kwargs=kwargs) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        graph = builder.compile(checkpointer=saver)

        async def one() -> tuple[float, float]:
            invoked = time.perf_counter()
            config = {"configurable": {"thread_id": uuid.uuid4().hex}}
            final = await graph.ainvoke({"done": 0, "began": 0.0}, config)
            return final["began"], time.perf_counter() - invoked

        return list(await asyncio.gather(*(one() for _ in range(runs))))


# --- The section -------------------------------------------------------------------


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django("_inflight")
    sizes = SIZES["quick" if quick else "full"]
    systems: dict[str, Any] = {"durableruns": _durableruns(url, sizes)}
    cores = os.cpu_count() or 1
    if cores > 1:  # the restatement proposed in issue 23: one process per core
        systems[f"durableruns x{cores}"] = _durableruns(url, sizes, processes=cores)
    # The opt-in pool of README "Sizing workers": greenlets instead of threads.
    systems["durableruns gevent"] = _durableruns(url, sizes, celery_pool="gevent")
    for name in ("dbos", "langgraph"):
        try:
            systems[name] = [_peer(name, runs) for runs in sizes]
        except Exception as exc:  # a missing optional peer is reported, not fatal
            systems[name] = f"not measured: {type(exc).__name__}: {exc}"
        print(f"{name}: {systems[name]}", file=sys.stderr, flush=True)
    return {
        "waits": WAITS,
        "wait_seconds": WAIT_SECONDS,
        "threads": THREADS,
        "pool_size": POOL_SIZE,
        "load_average": os.getloadavg(),
        "systems": systems,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer"]:
        _run_peer(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    else:
        section_main(measure)
