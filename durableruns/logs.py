"""Logging that is safe and useful in production.

- `RedactingFilter` (on every handler) passes messages, arguments and tracebacks
  through the redactor, so a secret in an exception message never reaches a log.
- `RunContextFilter` adds `run_id` and `step_id` to every record, from context
  variables the executor sets while it drives a run.
- `JsonFormatter` writes one JSON object per line (DURABLERUNS_LOG_FORMAT=json).
- `GunicornLogger` (`gunicorn --logger-class durableruns.logs.GunicornLogger`) puts
  the redacting filter on gunicorn's own error and access logs, which do not go
  through Django's LOGGING: request lines with `?api_key=...` lose the value.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from urllib.parse import unquote_plus

from .secret_text import redact_text

current_run_id: contextvars.ContextVar[str] = contextvars.ContextVar("run_id", default="")
current_step_id: contextvars.ContextVar[str] = contextvars.ContextVar("step_id", default="")


@contextmanager
def run_context(run_id: str) -> Iterator[None]:
    token = current_run_id.set(run_id)
    try:
        yield
    finally:
        current_run_id.reset(token)
        current_step_id.set("")


def set_step(step_id: str) -> None:
    current_step_id.set(step_id)


class RunContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = getattr(record, "run_id", "") or current_run_id.get()
        record.step_id = getattr(record, "step_id", "") or current_step_id.get()
        return True


class RedactingFilter(logging.Filter):
    """Redacts the formatted message and traceback in place; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = self.redact_message(record.getMessage())
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = redact_text(record.exc_text)
            if record.stack_info:
                record.stack_info = redact_text(record.stack_info)
        except Exception:  # logging must not fail: drop the payload instead
            record.msg, record.args, record.exc_text = "[log message withheld]", None, None
            record.exc_info = None
        return True

    def redact_message(self, message: str) -> str:
        return redact_text(message)


class RequestLineFilter(RedactingFilter):
    """For gunicorn's access log: a request line is URL-encoded, so `password%3Dx` or
    `the+password+is+x` hides from the redactor until decoded. A line with nothing
    secret is kept as sent; one with a secret is written decoded and redacted, with
    control characters escaped (a decoded %0A must not start a forged line)."""

    def redact_message(self, message: str) -> str:
        decoded = unquote_plus(message)
        if decoded == message:
            return redact_text(message)
        redacted = redact_text(decoded)
        if redacted == decoded:
            return message
        return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", redacted)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": getattr(record, "run_id", ""),
            "step_id": getattr(record, "step_id", ""),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = record.exc_text
        return json.dumps(entry)


def _gunicorn_logger_base() -> type:
    from gunicorn.glogging import Logger

    return Logger


class GunicornLogger(_gunicorn_logger_base()):  # type: ignore[misc]
    """gunicorn's logger with secrets (query strings included) redacted."""

    def setup(self, cfg: object) -> None:
        super().setup(cfg)
        for log, kind in ((self.error_log, RedactingFilter), (self.access_log, RequestLineFilter)):
            if not any(isinstance(f, RedactingFilter) for f in log.filters):
                log.addFilter(kind())
