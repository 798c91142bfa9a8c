"""gunicorn's own logs (access and error) go through the redactor too: a query
string's `api_key=` or `password=` never reaches the access log."""

from __future__ import annotations

import datetime
import io
import logging
from types import SimpleNamespace

from gunicorn.config import Config

from durableruns.logs import GunicornLogger

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
