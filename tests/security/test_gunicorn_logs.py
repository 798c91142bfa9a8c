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


def test_the_access_log_loses_secrets_in_query_strings():
    stream = io.StringIO()
    logger = _logger(stream)
    query = f"api_key={SECRET}&password=hunter2-pw&page=2"
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

    line = stream.getvalue()
    assert "/api/runs/?api_key=" in line
    assert SECRET not in line
    assert "hunter2-pw" not in line
    assert "page=2" in line


def test_the_error_log_loses_secrets():
    stream = io.StringIO()
    logger = _logger(stream)
    logger.error("worker failed: Authorization: Bearer %s", SECRET)
    assert "worker failed" in stream.getvalue()
    assert SECRET not in stream.getvalue()
