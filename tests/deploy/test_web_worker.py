"""The web service's gunicorn worker (durableruns/web/gunicorn_worker.py) serves state
changes ahead of polls: with every shared thread held by GETs and more GETs queued, a
POST is still answered at once, on a kept-alive connection or a new one. The login form
waits with the GETs. Its threads hand the GIL over every millisecond, so a decision
waiting on Postgres gets it back soon from threads rendering polls."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from durableruns.web.gunicorn_worker import serves_first
from tests.conftest import ROOT, wait_for

WORKER = "durableruns.web.gunicorn_worker.ThreadWorker"


@pytest.fixture
def held_server(tmp_path: Path) -> Iterator[tuple[int, Path, list[threading.Thread]]]:
    """gunicorn (one process, one shared thread) over tests/deploy/held_app.py; the port,
    the file that releases held GETs, and the threads holding them, which are answered
    before the server stops (stopped under them, they died of a reset connection)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    release = tmp_path / "release"
    env = {
        **os.environ,
        "HELD_ENTERED": str(tmp_path / "entered"),
        "HELD_RELEASE": str(release),
    }
    command = [
        sys.executable, "-m", "gunicorn", "tests.deploy.held_app:application",
        "--bind", f"127.0.0.1:{port}", "--workers", "1", "--worker-class", WORKER,
        "--threads", "1", "--keep-alive", "30",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    holding: list[threading.Thread] = []
    try:
        wait_for(lambda: _answers(port), timeout=30, message="gunicorn to answer")
        yield port, release, holding
    finally:
        release.touch()
        for thread in holding:
            thread.join(timeout=15)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _answers(port: int) -> bool:
    try:
        return _request(port, "GET", "/") == "GET"
    except OSError:
        return False


def _request(
    port: int, method: str, path: str, conn: http.client.HTTPConnection | None = None
) -> str:
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path, body=b"x=1" if method == "POST" else None)
    return conn.getresponse().read().decode()


def _hold_the_shared_thread(port: int, entered: Path, holding: list[threading.Thread]) -> None:
    """One GET holds the only shared thread; two more wait behind it."""
    holding += [
        threading.Thread(target=_request, args=(port, "GET", "/held/"), daemon=True)
        for _ in range(3)
    ]
    holding[0].start()
    wait_for(entered.exists, timeout=10, message="the held GET to start")
    for thread in holding[1:]:
        thread.start()


def test_a_post_is_answered_while_gets_hold_every_shared_thread(held_server, tmp_path):
    port, release, holding = held_server
    kept_alive = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    assert _request(port, "POST", "/approvals/1/decide/", kept_alive) == "POST"
    _hold_the_shared_thread(port, tmp_path / "entered", holding)

    assert _request(port, "POST", "/approvals/2/decide/", kept_alive) == "POST"
    assert _request(port, "POST", "/runs/r-1/cancel/") == "POST"  # a new connection
    assert not release.exists()  # answered while the GETs were still held


def test_the_login_form_waits_with_the_gets(held_server, tmp_path):
    port, _, holding = held_server
    _hold_the_shared_thread(port, tmp_path / "entered", holding)
    waiting = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    with pytest.raises(TimeoutError):
        _request(port, "POST", "/login/", waiting)


def test_it_sorts_requests_by_their_request_line():
    login = "/login/"
    assert serves_first(b"POST /approvals/7/decide/ HTTP/1.1\r\n", login)
    assert serves_first(b"DELETE /api/runs/r-1 HTTP/1.1\r\n", login)
    assert not serves_first(b"GET /runs/r-1/ HTTP/1.1\r\nHX-Request: true\r\n", login)
    assert not serves_first(b"HEAD / HTTP/1.1\r\n", login)
    assert not serves_first(b"POST /login/?next=/ HTTP/1.1\r\n", login)
    assert not serves_first(b"\x16\x03\x01\x02\x00", login)  # a TLS hello


def test_its_threads_hand_the_gil_over_every_millisecond(held_server):
    port, _, _ = held_server
    assert _request(port, "GET", "/switch-interval/") == "0.001"
