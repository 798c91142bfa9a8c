"""Recorded errors: how an exception is stored, and raised again on replay.

Agent code sees the same exception (class and message) the first time a step
fails and on every replay, so its control flow cannot diverge between the two.
"""

from __future__ import annotations

import traceback
from typing import Any

from .errors import REPLAYABLE_ERRORS, DurableRunsError, PermanentError
from .redaction import redact_text

# Exceptions that mean "the request may have been sent, the answer was lost".
AMBIGUOUS_BUILTINS = (TimeoutError, ConnectionResetError, BrokenPipeError)


def describe(exc: BaseException, *, with_traceback: bool = False) -> dict[str, Any]:
    """The stored form of an error. Unclassified exceptions are recorded as permanent."""
    if isinstance(exc, DurableRunsError):
        kind = type(exc).__name__ if type(exc).__name__ in REPLAYABLE_ERRORS else _base_name(exc)
        message = str(exc)
    else:
        kind = PermanentError.__name__
        message = f"{type(exc).__name__}: {exc}"
    error: dict[str, Any] = {"type": kind, "message": redact_text(message)}
    if with_traceback:
        error["traceback"] = redact_text("".join(traceback.format_exception(exc)))
    return error


def _base_name(exc: DurableRunsError) -> str:
    for cls in type(exc).__mro__:
        if cls.__name__ in REPLAYABLE_ERRORS:
            return cls.__name__
    return PermanentError.__name__


def rebuild(error: dict[str, Any]) -> DurableRunsError:
    cls = REPLAYABLE_ERRORS.get(error.get("type", ""), PermanentError)
    return cls(error.get("message", ""))
