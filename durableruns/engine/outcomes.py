"""Recorded errors: how an exception is stored, and raised again on replay.

Agent code sees the same exception (class and message) the first time a step
fails and on every replay, so its control flow cannot diverge between the two.
"""

from __future__ import annotations

import traceback
from typing import Any

from .errors import (
    REPLAYABLE_ERRORS,
    AmbiguousOutcome,
    DurableRunsError,
    PermanentError,
    TransientError,
)
from .redaction import redact_text
from .retry import AMBIGUOUS, PERMANENT, TRANSIENT, classify

_RECORDED_AS = {TRANSIENT: TransientError, AMBIGUOUS: AmbiguousOutcome, PERMANENT: PermanentError}


def verdict(exc: BaseException) -> str:
    """TRANSIENT, AMBIGUOUS or PERMANENT: what retrying `exc` may do (engine/retry.py)."""
    if isinstance(exc, TransientError):
        return TRANSIENT
    if isinstance(exc, AmbiguousOutcome):
        return AMBIGUOUS
    if isinstance(exc, DurableRunsError):
        return PERMANENT  # the author said what it is (ModelRecoverableError, ...)
    return classify(exc)


def describe(exc: BaseException, *, with_traceback: bool = False) -> dict[str, Any]:
    """The stored form of an error. Other libraries' exceptions are recorded under the
    class their verdict maps to, and the message says the verdict (and, when it is
    permanent, how to make it retried), as the run page shows it."""
    if isinstance(exc, DurableRunsError):
        kind = type(exc).__name__ if type(exc).__name__ in REPLAYABLE_ERRORS else _base_name(exc)
        message = str(exc)
    else:
        found = classify(exc)
        kind = _RECORDED_AS[found].__name__
        message = f"{found}: {type(exc).__name__}: {exc}"
        if found == PERMANENT:
            message += " (not retried; raise dr.TransientError to retry it)"
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
