"""The cluster crashtest runs against: a provider server, supervised Celery workers
started as their own process groups, and a sweeper, started and stopped together."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import close_old_connections, connection

from durableruns.services.sweeper import sweep

POLL_SECONDS = 0.02


class CrashTestError(Exception):
    """crashtest cannot run (no baseline, no providers, a bad agent or input)."""


POOLS = ("solo", "prefork", "threads", "gevent")
SHARED_POOLS = ("threads", "gevent")  # many runs to a process, as the documented worker
SESSIONS_PER_WORKER = 4  # a shared pool's Postgres sessions (DURABLERUNS_DB_POOL_SIZE)


@dataclass(frozen=True)
class Options:
    workers: int = 3
    # solo: the crash kills the whole worker (process, broker connection, unacked
    # message) and the supervisor starts a new one, which costs a second of CPU.
    # prefork: the crash kills the pool process executing the run; the Celery
    # master requeues the message and forks a fresh process at once. Same engine
    # recovery, much cheaper, so larger matrices finish sooner.
    # threads (the documented worker, README "Sizing workers") or its opt-in gevent:
    # each worker runs its share of the runs in flight on a pool of sessions, so a crash
    # kills every run in flight there, as an OOM kill of a production worker would, and
    # the supervisor starts a new one.
    pool: str = "solo"
    lease_ttl: float = 1.5
    sweep_interval: float = 0.5
    parallel: int | None = None  # runs in flight at once; default 2 per worker
    run_timeout: float = 60.0  # a run not finished or escalated by then is lost
    ignore_results: bool = False  # for agents whose model is not deterministic
    # Drive run.llm through the OpenAI-compatible stand-in served with the providers
    # (real HTTP, tool_calls and usage), instead of the in-process scripted model.
    stand_in_model: bool = False

    @property
    def in_flight(self) -> int:
        return self.parallel or 2 * self.workers

    @property
    def concurrency(self) -> int:
        """Runs one worker executes at once."""
        if self.pool not in SHARED_POOLS:
            return 1
        return -(-self.in_flight // self.workers)


def database_url() -> str:
    """The database this process uses, as a URL for the worker processes."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def providers_reachable(url: str) -> bool:
    try:
        response = httpx.get(
            f"{url.rstrip('/')}/providers/search", params={"q": "ping"}, timeout=1.0
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


class Cluster:
    """Everything crashtest runs against, started and stopped together."""

    def __init__(self, options: Options, work_dir: Path) -> None:
        self.options = options
        self.work_dir = work_dir
        self.crash_dir = work_dir / "crashes"
        self.crash_dir.mkdir()
        self.queue = f"crashtest-{uuid.uuid4().hex[:8]}"
        self.provider_url = settings.DURABLERUNS_PROVIDER_URL
        self.started_server = False
        self.workers: list[subprocess.Popen] = []
        self.restarts = 0
        self._server: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._respawning = threading.Lock()  # no worker is spawned once stopping
        self._threads: list[threading.Thread] = []
        self._spawned = 0

    def env(self) -> dict[str, str]:
        path = [os.getcwd(), str(settings.BASE_DIR), os.environ.get("PYTHONPATH", "")]
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "DATABASE_URL": database_url(),
            "REDIS_URL": settings.CELERY_BROKER_URL if settings.REDIS_URL else "",
            "DURABLERUNS_QUEUE": self.queue,
            "DURABLERUNS_PROVIDER_URL": self.provider_url,
            "DURABLERUNS_LEASE_TTL": str(self.options.lease_ttl),
            "DURABLERUNS_SWEEP_INTERVAL": str(self.options.sweep_interval),
            "DURABLERUNS_CRASH_DIR": str(self.crash_dir),
            "DURABLERUNS_AGENT_MODULES": ",".join(settings.DURABLERUNS_AGENT_MODULES),
            "DURABLERUNS_LANGGRAPH_GRAPHS": ",".join(settings.DURABLERUNS_LANGGRAPH_GRAPHS),
            "DURABLERUNS_LANGGRAPH_LEASE_TTL": str(self.options.lease_ttl),
            "PYTHONUNBUFFERED": "1",
            **self._model_env(),
            **self._pool_env(),
        }

    def _pool_env(self) -> dict[str, str]:
        if self.options.pool not in SHARED_POOLS:
            return {}
        # The pool and persistent connections exclude each other (settings).
        return {
            "DURABLERUNS_DB_POOL_SIZE": str(SESSIONS_PER_WORKER),
            "DURABLERUNS_CONN_MAX_AGE": "0",
        }

    def _model_env(self) -> dict[str, str]:
        if not self.options.stand_in_model:
            return {}
        return {
            "DURABLERUNS_MODEL_URL": f"{self.provider_url.rstrip('/')}/providers/v1",
            "DURABLERUNS_MODEL_API": "openai",
        }

    def __enter__(self) -> Cluster:
        from durableruns.celery import app

        self._previous_queue = app.conf.task_default_queue
        app.conf.task_default_queue = self.queue  # our doorbells go to our workers only
        try:
            self._serve_providers()
            for _ in range(self.options.workers):
                self.workers.append(self._spawn_worker())
            self._start_thread(self._supervise, "crashtest-supervisor")
            self._start_thread(self._sweep, "crashtest-sweeper")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        from durableruns.celery import app

        with self._respawning:
            self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for proc in [*self.workers, *([self._server] if self._server else [])]:
            _terminate(proc)
        app.conf.task_default_queue = self._previous_queue
        self._delete_queue(app)

    def _delete_queue(self, app: Any) -> None:
        """Leave nothing behind in the broker (doorbells are worthless once we are done)."""
        with contextlib.suppress(Exception), app.connection_for_write() as conn:
            conn.default_channel.queue_delete(self.queue)

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _serve_providers(self) -> None:
        if providers_reachable(self.provider_url):
            return
        port = _free_port()
        self.provider_url = f"http://127.0.0.1:{port}"
        self._server = self._spawn(
            [
                sys.executable,
                "-m",
                "django",
                "runserver",
                "--noreload",
                "--skip-checks",
                f"127.0.0.1:{port}",
            ],
            "providers",
        )
        self.started_server = True
        deadline = time.monotonic() + 30
        while not providers_reachable(self.provider_url):
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise CrashTestError(
                    f"the provider server did not start; see {self.work_dir / 'providers.log'}"
                )
            time.sleep(0.1)

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        with log:
            return subprocess.Popen(
                args, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _spawn_worker(self) -> subprocess.Popen:
        # Every pool but prefork executes tasks in the worker process itself, so a
        # crash point kills the whole worker, as an OOM kill or a lost machine would.
        self._spawned += 1
        name = f"crashtest-{self._spawned}-{uuid.uuid4().hex[:6]}@%h"
        return self._spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "durableruns",
                "worker",
                f"--pool={self.options.pool}",
                f"--concurrency={self.options.concurrency}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
                "-Q",
                self.queue,
                "-n",
                name,
            ],
            f"worker-{self._spawned}",
        )

    def _supervise(self) -> None:
        """Replace every worker that died (the crash points kill them)."""
        while not self._stop.wait(POLL_SECONDS):
            for index, proc in enumerate(self.workers):
                if proc.poll() is None:
                    continue
                _terminate(proc)  # reap anything left in its process group
                with self._respawning:
                    # Stopped meanwhile: a worker spawned now would outlive the
                    # cluster, sweeping (and resuming runs of) the next test's database.
                    if self._stop.is_set():
                        return
                    self.workers[index] = self._spawn_worker()
                    self.restarts += 1

    def _sweep(self) -> None:
        """The sweeper: rings runs whose lease expired (as `celery beat` does in production)."""
        try:
            while not self._stop.wait(self.options.sweep_interval):
                try:
                    sweep()
                except Exception:  # the database may be busy; the next sweep tries again
                    close_old_connections()
        finally:
            connection.close()


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
