"""`make demo` (manage.py demo) as a person runs it: the embedded SQLite and broker,
no beat. It sweeps every interval, restarts over its own var/ whatever retention did,
and stops every child when one fails to start. The logins test runs `make demo PORT=…`."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, wait_for
from tests.deploy.environ import deployment_environ

pytestmark = pytest.mark.chaos

INTERVAL = 1.0
# Watch until this many sweeps are seen (not for a fixed time), within a deadline that
# still asks for 70% of the intervals to have a sweep.
SWEEPS = 10
WATCH_SECONDS = SWEEPS * INTERVAL / 0.7


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def var_dir(tmp_path) -> Path:
    return tmp_path / "var"


def _demo(var_dir: Path, port: int, log: Path, *, via_make: bool = False) -> subprocess.Popen:
    env = deployment_environ()
    for name in ("DATABASE_URL", "REDIS_URL", "DURABLERUNS_QUEUE", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(
        DURABLERUNS_VAR_DIR=str(var_dir),
        DURABLERUNS_SWEEP_INTERVAL=str(INTERVAL),
        PYTHONUNBUFFERED="1",
    )
    command = [sys.executable, "manage.py", "demo", "--port", str(port)]
    if via_make:
        # The README's command, with this interpreter and without rebuilding the venv.
        command = ["make", "-s", "-o", ".venv/.installed", "demo", f"PORT={port}"]
        command.append(f"PY={sys.executable}")
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _swept_at(var_dir: Path) -> str | None:
    try:
        with sqlite3.connect(var_dir / "durableruns.sqlite3", timeout=5) as db:
            row = db.execute("SELECT swept_at FROM durableruns_sweeperbeat WHERE id = 1").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _tails(*logs: Path) -> str:
    """The end of each log, for a failure to say why a child died."""
    return "\n".join(f"--- {log}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(demo: subprocess.Popen) -> None:
    demo.send_signal(signal.SIGTERM)
    demo.wait(timeout=30)
    _assert_group_gone(demo)


def _assert_group_gone(demo: subprocess.Popen) -> None:
    def gone() -> bool:
        try:
            os.killpg(demo.pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout=15, message="every child of the demo to exit")


def _sweeps(var_dir: Path, count: int, seconds: float) -> list[float]:
    """Distinct sweep times seen, watching until `count` are seen or `seconds` pass."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while len(seen) < count and time.monotonic() < deadline:
        at = _swept_at(var_dir)
        if at and (not seen or seen[-1] != at):
            seen.append(at)
        time.sleep(0.1)
    return [datetime.fromisoformat(at).timestamp() for at in seen]


def test_the_demo_sweeps_every_interval_and_restarts_over_its_var(var_dir, tmp_path):
    port, log = _free_port(), tmp_path / "demo.log"
    demo = _demo(var_dir, port, log)
    try:
        wait_for(lambda: _healthy(port), timeout=90, message="the demo to be healthy")
        sweeps = _sweeps(var_dir, SWEEPS, WATCH_SECONDS)
        gaps = [b - a for a, b in itertools.pairwise(sweeps)]
        assert demo.poll() is None, _tails(log, var_dir / "worker.log")
        assert len(sweeps) == SWEEPS, sweeps
        assert max(gaps) < 2 * INTERVAL, gaps
        assert _healthy(port)
    finally:
        _stop(demo)
    assert "locking protocol" not in log.read_text()

    # Retention redacted a demo run's input meanwhile: the restart keeps it.
    with sqlite3.connect(var_dir / "durableruns.sqlite3") as db:
        db.execute(
            "UPDATE durableruns_run SET input = ? WHERE id = 'demo-refund-kettle'",
            ['{"order_id": "[redacted]"}'],
        )
    demo = _demo(var_dir, port, log)
    try:
        wait_for(lambda: _healthy(port), timeout=90, message="the restarted demo to be healthy")
        assert demo.poll() is None
    finally:
        _stop(demo)


def test_the_demo_stops_every_child_when_one_fails_to_start(var_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        demo = _demo(var_dir, port, tmp_path / "demo.log")
        assert demo.wait(timeout=90) != 0
    _assert_group_gone(demo)


def test_the_logins_are_last_on_screen_and_in_var(var_dir, tmp_path):
    """The server's access log and the worker's banner go to var/*.log and the e-mails
    to var/mail/, so the URL and logins stay on screen however the demo is used."""
    port, log = _free_port(), tmp_path / "demo.log"
    demo = _demo(var_dir, port, log, via_make=True)
    try:
        wait_for(lambda: _healthy(port), timeout=90, message="the demo to be healthy")
        wait_for(lambda: "Press Ctrl-C" in log.read_text(), timeout=30, message="the logins")
        for _ in range(5):
            httpx.get(f"http://127.0.0.1:{port}/login/", timeout=10)
        # The bike refund's approval e-mail is written once the worker reaches it.
        wait_for(
            lambda: any("Subject:" in m.read_text() for m in (var_dir / "mail").glob("*")),
            timeout=90,
            message="the approval e-mail in var/mail",
        )
        lines = log.read_text().splitlines()  # the screen while it runs
    finally:
        _stop(demo)
    shown = "\n".join(lines[:40])
    for role in ("reviewer", "operator", "admin"):
        assert f"log in as {role}" in shown, shown
    assert lines[-1] == "Press Ctrl-C to stop.", lines[-12:]
    assert len(lines) <= 9, lines
    worker_log = (var_dir / "worker.log").read_text()
    assert "Subject:" not in worker_log and "celery.redirected" not in worker_log, worker_log
    assert f"http://127.0.0.1:{port}/" in (var_dir / "demo.txt").read_text()
    assert "admin-demo-pass" in (var_dir / "demo.txt").read_text()
    assert "GET /login/" in (var_dir / "web.log").read_text()


def test_a_port_in_use_is_named_with_what_to_do(var_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "demo.log"
        demo = _demo(var_dir, port, log)
        assert demo.wait(timeout=90) != 0
    assert f"port {port} is in use" in log.read_text()
    assert "make demo PORT=" in log.read_text()
