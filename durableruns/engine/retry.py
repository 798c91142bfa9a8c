"""The engine's one retry layer (invariant 12): how an exception is classified, and
exponential backoff with full jitter.

An exception that is not one of the dr.* errors is classified by what it says about
the request (the README's "Errors and retries" table):
- TRANSIENT: the request was not sent, or the server said "not now" (a refused
  connection, a DNS failure, HTTP 429 or 503). Retried for every kind of step.
- AMBIGUOUS: the request may have been sent and the answer lost (a timeout, a reset
  connection, HTTP 500/502/504). Retried for reads and for idempotent writes (same
  key); an unsafe write is reconciled or escalated to a person, never blindly retried.
- PERMANENT: anything else (ValueError, KeyError, other HTTP 4xx): not retried.

Client libraries (httpx, requests, openai, anthropic) are never imported here: their
exception classes are looked up only in modules the process has already imported,
which any exception of theirs implies.
"""

from __future__ import annotations

import random
import socket
import sys
import urllib.error

from django.conf import settings

TRANSIENT, AMBIGUOUS, PERMANENT = "transient", "ambiguous", "permanent"

_NOT_SENT = (ConnectionRefusedError, socket.gaierror)
_MAYBE_SENT = (TimeoutError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
# (module, class names) per verdict, for libraries that may not be installed.
_LIBRARY_ERRORS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    TRANSIENT: (
        ("httpx", ("ConnectError", "ConnectTimeout", "PoolTimeout", "ProxyError")),
        ("requests", ("ConnectTimeout",)),
    ),
    AMBIGUOUS: (
        ("httpx", ("TimeoutException", "NetworkError", "RemoteProtocolError")),
        ("requests", ("ConnectionError", "Timeout", "ChunkedEncodingError")),
        ("openai", ("APIConnectionError",)),  # its APITimeoutError is one
        ("anthropic", ("APIConnectionError",)),
    ),
}
_TRANSIENT_STATUS = frozenset({429, 503})
_AMBIGUOUS_STATUS = frozenset({408, 500, 502, 504})


def classify(exc: BaseException) -> str:
    """TRANSIENT, AMBIGUOUS or PERMANENT, for an exception that is not a dr.* error."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        return classify(exc.reason)
    if isinstance(exc, _NOT_SENT):
        return TRANSIENT
    if isinstance(exc, _MAYBE_SENT):
        return AMBIGUOUS
    for verdict in (TRANSIENT, AMBIGUOUS):
        if _is_library_error(exc, verdict):
            return verdict
    status = http_status(exc)
    if status in _TRANSIENT_STATUS:
        return TRANSIENT
    if status in _AMBIGUOUS_STATUS:
        return AMBIGUOUS
    return PERMANENT


def _is_library_error(exc: BaseException, verdict: str) -> bool:
    for module_name, names in _LIBRARY_ERRORS[verdict]:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        classes = tuple(c for n in names if isinstance(c := getattr(module, n, None), type))
        if classes and isinstance(exc, classes):
            return True
    return False


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a client's status error carries (httpx, requests, openai,
    anthropic: `status_code` on it or on its `response`; urllib: `code`)."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code
    for source in (exc, getattr(exc, "response", None)):
        status = getattr(source, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def backoff_seconds(attempt: int) -> float:
    """Delay before attempt `attempt + 1`: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    ceiling = min(
        settings.DURABLERUNS_RETRY_MAX_DELAY,
        settings.DURABLERUNS_RETRY_BASE_DELAY * 2 ** (attempt - 1),
    )
    return random.uniform(0, ceiling)


def max_attempts() -> int:
    return settings.DURABLERUNS_RETRY_MAX_ATTEMPTS
