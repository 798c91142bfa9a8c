"""gunicorn's own logs (access and error) go through the redactor too: a query
string's `api_key=` or `password=` never reaches the access log."""

from __future__ import annotations

import datetime
import io
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from django.db import connection
from gunicorn.config import Config

from durableruns.logs import GunicornLogger
from tests.conftest import ROOT, wait_for
from tests.deploy.environ import deployment_environ

SECRET = "sk_live_QwErTy123456789"


def _logger(stream: io.StringIO) -> GunicornLogger:
    cfg = Config()
    cfg.set("accesslog", "-")
    logger = GunicornLogger(cfg)
    for log in (logger.access_log, logger.error_log):
        for handler in log.handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(stream)
    return logger


def _access_line(query: str) -> str:
    stream = io.StringIO()
    logger = _logger(stream)
    request = SimpleNamespace(
        method="GET",
        path="/api/runs/",
        query=query,
        uri=f"/api/runs/?{query}",
        version=(1, 1),
        headers=[],
    )
    response = SimpleNamespace(status="200 OK", headers=[], sent=10, response_length=10)
    environ = {
        "RAW_URI": f"/api/runs/?{query}",
        "QUERY_STRING": query,
        "REMOTE_ADDR": "1.2.3.4",
        "REQUEST_METHOD": "GET",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    logger.access(response, request, environ, datetime.timedelta(seconds=0.01))
    return stream.getvalue()


def test_the_access_log_loses_secrets_in_query_strings():
    line = _access_line(f"api_key={SECRET}&password=hunter2-pw&page=2")
    assert "/api/runs/?api_key=" in line
    assert SECRET not in line
    assert "hunter2-pw" not in line
    assert "page=2" in line


def test_the_access_log_loses_this_products_token_in_any_parameter():
    token = "dr_0123456789ab_" + "Aa0_-" * 8 + "xyz"
    line = _access_line(f"whatever={token}&page=2")
    assert token[3:] not in line
    assert "page=2" in line


def test_the_access_log_decodes_the_query_before_redacting():
    line = _access_line("q=password%3Dhunter2-enc%26x%3D1&note=the%20password%20is%20s3cret-enc")
    assert "hunter2-enc" not in line
    assert "s3cret-enc" not in line
    assert "/api/runs/?q=" in line


def test_a_decoded_line_break_cannot_forge_a_log_line():
    lines = _access_line("password%3Dx%0A1.2.3.4%20-%20forged").splitlines()
    assert all("GET /api/runs/" in line for line in lines if "forged" in line)


def test_the_error_log_loses_secrets():
    stream = io.StringIO()
    logger = _logger(stream)
    logger.error("worker failed: Authorization: Bearer %s", SECRET)
    assert "worker failed" in stream.getvalue()
    assert SECRET not in stream.getvalue()


@pytest.mark.django_db(transaction=True)
def test_a_real_gunicorn_logs_its_start_and_redacts_its_request_lines(tmp_path):
    """gunicorn's master logs before any worker sets Django up: those lines are written,
    not withheld, and a request line's token and encoded password are not."""
    port = _free_port()
    db = connection.settings_dict
    env = {
        **deployment_environ(),
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)  # as in the Dockerfile: wsgi.py sets it
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "durableruns.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
                "--access-logfile",
                "-",
                "--logger-class",
                "durableruns.logs.GunicornLogger",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: _answers(port), timeout=90, message="gunicorn to answer")
        assert "Booting worker" in log.read_text()
        token = "dr_0123456789ab_" + "Aa0_-" * 8 + "xyz"
        httpx.get(f"http://127.0.0.1:{port}/login/?x={token}&q=password%3Dhunter2-enc")
        wait_for(lambda: "/login/?" in log.read_text(), timeout=30, message="the request line")
    except AssertionError:
        raise AssertionError(log.read_text()) from None
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    text = log.read_text()
    assert "Starting gunicorn" in text and "Booting worker" in text, text
    assert "withheld" not in text, text
    assert token[3:] not in text and "hunter2-enc" not in text, text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/login/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
