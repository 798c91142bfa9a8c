"""Shared fixtures: named actors, real Celery worker and beat processes, waiting helpers.

Tests that start processes use pytest-django's `live_server` (which implies a
transactional database the subprocesses can see); the stand-in providers are
served by it, and workers reach them at its URL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from durableruns import roles
from tests import fast_flush

ROOT = Path(__file__).resolve().parent.parent
# Small values so recovery is fast in tests; production defaults are 30 s and 5 s.
TEST_LEASE_TTL = 1.5
TEST_SWEEP_INTERVAL = 0.5


_ISOLATED = "DURABLERUNS_TEST_REDIS_ISOLATED"


def _isolate_xdist_worker() -> None:
    """Give each pytest-xdist worker (gw0, gw1, …) its own Redis db: REDIS_URL's db plus
    the worker's index, so `REDIS_URL=…/9 pytest -n 3` uses dbs 9, 10 and 11. Django's
    settings are loaded before this conftest, and nothing has connected to the cache or
    the broker yet, so the settings are pointed at it here. The rest is already per
    worker or per test: pytest-django names the database test_<name>_gwN, `processes`
    picks a fresh Celery queue and live_server a free port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    # A process a test spawns inherits both variables and imports this module again:
    # its REDIS_URL is already the worker's, and adding the index twice would leave the
    # 16 dbs Redis has (gw4 of five asked for db 18 and its spawned writer died).
    if not worker or not django_settings.REDIS_URL or os.environ.get(_ISOLATED) == worker:
        return
    url = urlsplit(django_settings.REDIS_URL)
    db = int(url.path.strip("/") or 0) + int(worker.removeprefix("gw"))
    worker_url = urlunsplit(url._replace(path=f"/{db}"))
    try:
        redis.Redis.from_url(worker_url, socket_timeout=5).ping()
    except redis.ResponseError as exc:
        raise pytest.UsageError(
            f"xdist worker {worker} needs Redis db {db} ({exc}): lower REDIS_URL's db "
            "or run fewer workers (-n)"
        ) from None
    # Subprocesses (workers, beat, deployed stacks) read these.
    os.environ["REDIS_URL"] = worker_url
    os.environ[_ISOLATED] = worker
    django_settings.REDIS_URL = django_settings.CELERY_BROKER_URL = worker_url
    django_settings.CACHES["default"]["LOCATION"] = worker_url


_isolate_xdist_worker()
fast_flush.install()

# Every process a test starts inherits this, each pytest process (xdist worker) its
# own, so a server or worker left running after its test is told from another's.
os.environ["DURABLERUNS_TEST_OWNER"] = str(os.getpid())
SERVICES = (b"celery", b"gunicorn", b"manage.py", b"runserver")


class StrayProcess(UserWarning):
    """A test left a worker or server running (it was killed)."""


def _strays() -> list[tuple[int, str]]:
    """This pytest process's workers and servers still running (zombies aside)."""
    mark = f"DURABLERUNS_TEST_OWNER={os.getpid()}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not any(word in command for word in SERVICES) or int(pid) == os.getpid():
                continue
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append((int(pid), command.replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A worker left running sweeps the next test's database with this test's agents
    and graphs: kill it, and say which test left it (the warnings summary)."""
    yield
    if not _strays():
        return
    time.sleep(1)  # one that its test is stopping right now is not a stray
    strays = _strays()
    for pid, _ in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if strays:
        warnings.warn(f"killed what this test left running: {strays}", StrayProcess, stacklevel=1)


def database_dsn() -> str:
    """libpq's connection string for the test database, for sessions outside Django's
    (an admin session that kills backends, a pool of the test's own)."""
    import psycopg

    db = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=db["NAME"],
        user=db["USER"],
        host=db["HOST"],
        port=db["PORT"],
        password=db["PASSWORD"] or None,
    )


def terminate_backends(admin: Any, backends: list[tuple[int]]) -> int:
    """Terminate the Postgres `backends` (rows of one pid) through `admin`, an open
    autocommit psycopg session; returns how many were still there."""
    return sum(
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        for (pid,) in backends
    )


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll an observable state with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@pytest.fixture(autouse=True)
def _close_the_saver_connections() -> Iterator[None]:
    """The LangGraph savers keep their own connections (the saver thread's, the async
    saver's psycopg one): close them after every test that used them, wherever it is
    (tests/e2e, tests/web, tests/chaos too), so none stays open into the next test or
    makes dropping the test database fail ("being accessed by other users")."""
    yield
    saver = sys.modules.get("durableruns.langgraph.saver")
    if saver is not None:  # not imported: no saver connection to close
        saver.close_connection()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The actors are created in every test; the production hasher costs ~1 s a user on
    a busy CI core. Logging in through the browser works the same with this one."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(django_user_model):
    """alice is a reviewer."""
    user = django_user_model.objects.create_user("alice", password="alice-password-1")
    roles.grant(user, roles.REVIEWER)
    return user


@pytest.fixture
def bob(django_user_model):
    """bob is an operator."""
    user = django_user_model.objects.create_user("bob", password="bob-password-1")
    roles.grant(user, roles.OPERATOR)
    return user


@pytest.fixture
def carol(django_user_model):
    """carol is an admin."""
    user = django_user_model.objects.create_user("carol", password="carol-password-1")
    roles.grant(user, roles.ADMIN)
    return user


@pytest.fixture
def dave(django_user_model):
    """dave has an account but no role."""
    return django_user_model.objects.create_user("dave", password="dave-password-1")


@pytest.fixture
def provider_url(live_server, settings):
    settings.DURABLERUNS_PROVIDER_URL = live_server.url
    return live_server.url


@pytest.fixture
def crash_dir(tmp_path, settings):
    path = tmp_path / "crashes"
    path.mkdir()
    settings.DURABLERUNS_CRASH_DIR = str(path)
    return path


class Processes:
    """Celery workers and beat as real subprocesses, each in its own process group."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []

    def _spawn(
        self, args: list[str], name: str, extra_env: dict[str, str] | None
    ) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "durableruns", *args],
            cwd=ROOT,
            env={**self.env, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def worker(
        self,
        *,
        pool: str = "solo",
        concurrency: int = 1,
        extra_env: dict[str, str] | None = None,
        name: str = "worker",
        queue: str = "",
    ) -> subprocess.Popen:
        """A worker; with the solo pool a crash point kills the whole worker process.
        `queue`: consume another queue than the one doorbells go to (it still sweeps)."""
        return self._spawn(
            [
                "worker",
                f"--pool={pool}",
                f"--concurrency={concurrency}",
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                queue or self.env["DURABLERUNS_QUEUE"],
                "-n",
                f"{name}-{uuid.uuid4().hex[:6]}@%h",
            ],
            name,
            extra_env,
        )

    def beat(self) -> subprocess.Popen:
        schedule = self.log_dir / f"beat-{uuid.uuid4().hex[:6]}"
        return self._spawn(["beat", "--loglevel=INFO", "-s", str(schedule)], "beat", None)

    @staticmethod
    def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if sig == signal.SIGKILL:
            proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.kill(proc)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.log_dir.glob("*.log"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Keep each phase's report on the test, for fixtures that explain a failure."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def processes(request, live_server, provider_url, tmp_path, settings) -> Iterator[Processes]:
    """Start workers/beat against the test database, the test Redis and the live server."""
    db = connection.settings_dict
    queue = f"test-{uuid.uuid4().hex[:8]}"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    from durableruns.celery import app

    app.conf.task_default_queue = queue
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.CELERY_BROKER_URL,
        "DURABLERUNS_QUEUE": queue,
        "DURABLERUNS_PROVIDER_URL": live_server.url,
        "DURABLERUNS_LEASE_TTL": str(TEST_LEASE_TTL),
        "DURABLERUNS_SWEEP_INTERVAL": str(TEST_SWEEP_INTERVAL),
        "DURABLERUNS_REDELIVER_AFTER": "3",
        "DURABLERUNS_RETRY_BASE_DELAY": "0.05",
        "DURABLERUNS_RETRY_MAX_DELAY": "0.2",
        "DURABLERUNS_CRASH_DIR": settings.DURABLERUNS_CRASH_DIR,
        "DURABLERUNS_VAR_DIR": str(tmp_path / "var"),
        "PYTHONUNBUFFERED": "1",
    }
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    procs = Processes(env, log_dir)
    yield procs
    procs.stop_all()
    failed = getattr(request.node, "report_call", None)
    if failed is not None and failed.failed:
        # A failure in CI says what the workers did, not only what the test saw.
        request.node.add_report_section("teardown", "worker logs", procs.logs())
    app.conf.task_default_queue = settings.CELERY_TASK_DEFAULT_QUEUE


@pytest.fixture(autouse=True)
def _fresh_shared_cache() -> Iterator[None]:
    """The cache is shared Redis: forget redaction rules and login failures that a
    rolled-back test left behind, so no test sees another's."""
    from django.core.cache import caches

    from durableruns.engine.redaction import rules_changed
    from durableruns.web.login_throttle import forget

    def clear() -> None:
        caches["live"].clear()  # this process's shared live answers (web/live_rows.py)
        rules_changed()
        for name in ("alice", "bob", "carol", "dave", "mallory"):
            forget(name, "127.0.0.1")

    clear()
    yield
    clear()


@pytest.fixture
def leader_tick(monkeypatch) -> Callable[[], None]:
    """One tick of a worker's sweep leader, with the jobs a worker gives it
    (tasks.periodic_jobs); the jobs' tasks run in this process (Celery eager), so a
    test sees what the leader's schedule actually did."""
    from durableruns.celery import app
    from durableruns.services.sweeper import LEADER_LOCK, SweepLeader
    from durableruns.tasks import periodic_jobs

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    monkeypatch.setitem(app.conf, "task_eager_propagates", True)
    leader = SweepLeader(periodic_jobs())

    def tick() -> None:
        leader._tick()
        assert leader.leading, "another session holds the sweep leader's lock"

    yield tick
    if leader.leading:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(LEADER_LOCK))


@pytest.fixture(autouse=True)
def _end_liveness() -> Iterator[None]:
    """An executor run in this process opens its liveness session on the test database:
    end it with the test, so the database can be flushed and dropped."""
    yield
    from durableruns.engine import liveness

    liveness.close()
