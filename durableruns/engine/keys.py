"""Canonical JSON, argument fingerprints and idempotency keys (invariant 3).

A key depends only on the run, the step and the arguments, never on time or
randomness, so every retry and every resume of the same logical call sends the
same key, in any process, whatever the order of the dict the caller built.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from .errors import SerializationError

MAX_KEY_LENGTH = 255


MAX_DEPTH = 100
"""Deepest nesting of lists and dicts accepted: deeper values are almost always a
bug (or a cycle), and would otherwise exhaust Python's recursion limit."""


def too_deep() -> SerializationError:
    return SerializationError(f"not JSON-serialisable: nested more than {MAX_DEPTH} levels deep")


def canonical_json(value: Any, *, limit: int | None = None) -> str:
    """Serialise with sorted keys and no whitespace; reject what JSON cannot carry."""
    _check(value, 0)
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        size = len(text.encode())
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise SerializationError(
            f"not JSON-serialisable: {bad!r} is a lone surrogate, not a Unicode character"
        ) from None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"not JSON-serialisable: {exc}") from None
    if limit is not None and size > limit:
        raise SerializationError(f"payload is {size} bytes, over the {limit}-byte limit")
    return text


_LEAVES = (str, int, bool, type(None))


def _check(value: Any, depth: int) -> None:
    # json.dumps would say "Out of range float values" or hit the recursion limit:
    # name the real problem instead.
    kind = type(value)
    if kind is dict:
        if depth >= MAX_DEPTH:
            raise too_deep()
        for key, item in value.items():
            if type(key) is not str:
                raise SerializationError(f"not JSON-serialisable: dict key {key!r} is not a string")
            if type(item) not in _LEAVES:  # the common leaves need no call
                _check(item, depth + 1)
        return
    if kind is list:
        if depth >= MAX_DEPTH:
            raise too_deep()
        for item in value:
            if type(item) not in _LEAVES:
                _check(item, depth + 1)
        return
    _check_any(value, depth)


def _check_any(value: Any, depth: int) -> None:
    """Everything but a plain dict or list: floats, tuples, subclasses."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SerializationError(f"not JSON-serialisable: {value!r} is not a finite number")
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        raise too_deep()
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"not JSON-serialisable: dict key {key!r} is not a string")
            _check(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _check(item, depth + 1)


def fingerprint(value: Any) -> str:
    """The first 16 hex digits of the SHA-256 of the canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]


def idempotency_key(run_id: str, step_id: str, tool: str, args: dict[str, Any]) -> str:
    key = f"{run_id}:{step_id}:{tool}:{fingerprint(args)}"
    if len(key) > MAX_KEY_LENGTH:
        raise SerializationError(f"idempotency key longer than {MAX_KEY_LENGTH} characters")
    return key
