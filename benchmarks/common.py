"""What every section shares: its own databases, Django set-up, statistics, workers.

Benchmarks use databases named `durableruns_bench*` (never the test databases of
other engineers) and a Redis database number of their own, with a queue name that
is unique per run, so they can run beside a test suite (the figures are noisier).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
# The Postgres server to use; each section picks its own database on it.
SERVER_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "durableruns_bench")
BENCH_AGENT_MODULES = "durableruns.demo.agents,benchmarks.agents"


def db_url(suffix: str = "") -> str:
    parts = urlsplit(SERVER_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{DB_PREFIX}{suffix}", "", ""))


def libpq_url(url: str) -> str:
    """psycopg, DBOS and LangGraph want `postgresql://`."""
    return "postgresql://" + url.split("://", 1)[1]


def admin_connect() -> Any:
    import psycopg

    return psycopg.connect(
        libpq_url(urlunsplit((*urlsplit(SERVER_URL)[:2], "/postgres", "", ""))), autocommit=True
    )


def create_database(name: str, *, fresh: bool = False) -> None:
    from psycopg import sql

    with admin_connect() as conn:
        if fresh:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(name: str) -> None:
    from psycopg import sql

    with admin_connect() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def setup_django(suffix: str = "", *, fresh: bool = False, **env: str) -> str:
    """Point this process at its own bench database, migrate it, and set Django up."""
    url = db_url(suffix)
    create_database(urlsplit(url).path.lstrip("/"), fresh=fresh)
    os.environ.update(
        {
            "DATABASE_URL": url,
            "REDIS_URL": REDIS_URL,
            "DURABLERUNS_AGENT_MODULES": BENCH_AGENT_MODULES,
            "DJANGO_SETTINGS_MODULE": "durableruns.settings",
            "LOG_LEVEL": "WARNING",
            **env,
        }
    )
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from durableruns.engine.executor import worker_ready

    worker_ready()
    _cancel_leftovers()
    return url


def _cancel_leftovers() -> None:
    """Cancel runs an earlier section left unfinished in this (bench-only) database.

    A section stopped by its time limit leaves queued runs behind; a later section's
    sweeper would ring them all, and its workers would be busy with them.
    """
    from durableruns.models import Run

    Run.objects.exclude(status__in=Run.TERMINAL).update(
        status=Run.Status.CANCELLED, lease_owner="", lease_expires_at=None, wake_at=None
    )


# --- Statistics ----------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, round(q / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: list[float]) -> dict[str, float]:
    """Median, p95, min, count: the numbers the report prints."""
    return {
        "median": statistics.median(values),
        "p95": percentile(values, 95),
        "min": min(values),
        "n": len(values),
    }


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


# --- Worker processes ----------------------------------------------------------


class Workers:
    """Real `celery -A durableruns worker` subprocesses on a queue of this run's own."""

    def __init__(self, database_url: str, log_dir: Path, **env: str) -> None:
        self.queue = f"bench-{uuid.uuid4().hex[:8]}"
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": REDIS_URL,
            "DURABLERUNS_QUEUE": self.queue,
            "DURABLERUNS_AGENT_MODULES": BENCH_AGENT_MODULES,
            "DURABLERUNS_VAR_DIR": str(log_dir / "var"),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.procs: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}
        # Doorbells rung in this process (start_run, decisions) go to this queue too.
        from durableruns.celery import app

        app.conf.task_default_queue = self.queue

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        path = self.log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log"
        with open(path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "durableruns", *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.logs[proc.pid] = path
        return proc

    def worker(self) -> subprocess.Popen:
        """One worker process (solo pool: the process that runs the task is this pid)."""
        return self._worker("--pool=solo")

    def documented_worker(self, concurrency: int, pool: str = "threads") -> subprocess.Popen:
        """One worker as the README's production table starts it: a thread pool (or,
        `pool="gevent"`, the opt-in greenlets of "Sizing workers")."""
        return self._worker(f"--pool={pool}", f"--concurrency={concurrency}")

    def _worker(self, *pool: str) -> subprocess.Popen:
        return self._spawn(
            [
                "worker",
                *pool,
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                self.queue,
                "-n",
                f"bench-{uuid.uuid4().hex[:6]}@%h",
            ],
            "worker",
        )

    def beat(self) -> subprocess.Popen:
        schedule = self.log_dir / f"beat-{uuid.uuid4().hex[:6]}"
        return self._spawn(["beat", "--loglevel=INFO", "-s", str(schedule)], "beat")

    def wait_ready(self, procs: list[subprocess.Popen], timeout: float = 90.0) -> None:
        def ready() -> bool:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"worker {proc.pid} exited: {self.tail(proc)}")
            return all(b" ready." in self.logs[p.pid].read_bytes() for p in procs)

        wait_for(ready, timeout=timeout, interval=0.1, message="workers ready")

    def tail(self, proc: subprocess.Popen) -> str:
        return self.logs[proc.pid].read_text(errors="replace")[-2000:]

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.kill(proc)
        self.procs.clear()
        _forget_queue(self.queue)


def _forget_queue(queue: str) -> None:
    """Delete this run's own queue keys from the bench Redis database (nothing else)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"*{queue}*"):
        client.delete(key)


@contextmanager
def workers(database_url: str, log_dir: Path, **env: str) -> Iterator[Workers]:
    pool = Workers(database_url, log_dir, **env)
    finished = False
    try:
        yield pool
        finished = True
    finally:
        pool.stop_all()
        if finished:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            print(f"worker logs kept in {log_dir}", file=sys.stderr)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


# --- Section entry point --------------------------------------------------------


def section_main(measure: Callable[[bool], dict[str, Any]]) -> None:
    """`python -m benchmarks.SECTION [--quick] [--keep] [--json PATH]`."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.keep:
        os.environ["BENCH_KEEP"] = "1"
    result = measure(args.quick)
    text = json.dumps(result, indent=2, default=str)
    if args.json:
        args.json.write_text(text)
    else:
        print(text)
