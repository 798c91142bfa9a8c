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


def canonical_json(value: Any, *, limit: int | None = None) -> str:
    """Serialise with sorted keys and no whitespace; reject what JSON cannot carry."""
    _reject_non_finite(value)
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"not JSON-serialisable: {exc}") from None
    if limit is not None and len(text.encode()) > limit:
        size = len(text.encode())
        raise SerializationError(f"payload is {size} bytes, over the {limit}-byte limit")
    return text


def _reject_non_finite(value: Any) -> None:
    # json.dumps would say "Out of range float values": name the real problem.
    if isinstance(value, float) and not math.isfinite(value):
        raise SerializationError(f"not JSON-serialisable: {value!r} is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"not JSON-serialisable: dict key {key!r} is not a string")
            _reject_non_finite(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _reject_non_finite(item)


def fingerprint(value: Any) -> str:
    """The first 16 hex digits of the SHA-256 of the canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]


def idempotency_key(run_id: str, step_id: str, tool: str, args: dict[str, Any]) -> str:
    key = f"{run_id}:{step_id}:{tool}:{fingerprint(args)}"
    if len(key) > MAX_KEY_LENGTH:
        raise SerializationError(f"idempotency key longer than {MAX_KEY_LENGTH} characters")
    return key
