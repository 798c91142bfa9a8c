"""Log records are redacted on every handler and carry the run and step they belong to."""

from __future__ import annotations

import io
import json
import logging

import pytest

from durableruns import logs

pytestmark = pytest.mark.django_db


@pytest.fixture
def stream():
    """A handler configured like settings.LOGGING's console handler."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(logs.RunContextFilter())
    handler.addFilter(logs.RedactingFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("tests.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield logger, out
    logger.removeHandler(handler)


def _lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_it_redacts_arguments_and_messages(stream):
    logger, out = stream
    logger.warning("calling with password=%s and %s", "hunter2", "Bearer abcdefghijklmnop")
    assert _lines(out)[0]["message"] == "calling with password=[REDACTED] and [REDACTED]"


def test_it_redacts_tracebacks(stream):
    logger, out = stream
    try:
        raise RuntimeError("refused key sk_live_abcdefghijkl")
    except RuntimeError:
        logger.exception("upstream failed")
    line = _lines(out)[0]
    assert "RuntimeError: refused key [REDACTED]" in line["exc"]
    assert "sk_live_abcdefghijkl" not in out.getvalue()


def test_it_carries_the_run_and_step(stream):
    logger, out = stream
    with logs.run_context("run-42"):
        logs.set_step("3")
        logger.info("executing")
    logger.info("outside")
    inside, outside = _lines(out)
    assert (inside["run_id"], inside["step_id"]) == ("run-42", "3")
    assert (outside["run_id"], outside["step_id"]) == ("", "")


def test_every_configured_handler_redacts():
    from django.conf import settings

    for name, handler in settings.LOGGING["handlers"].items():
        assert "redact" in handler["filters"], name
    root = logging.getLogger()
    assert any(isinstance(f, logs.RedactingFilter) for h in root.handlers for f in h.filters)
