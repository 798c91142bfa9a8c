"""Canonical JSON, argument fingerprints and idempotency keys (invariant 3).

A key depends only on the run, the step and the arguments, never on time or
randomness, so every retry and every resume of the same logical call sends the
same key, in any process, whatever the order of the dict the caller built.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from typing import Any

import orjson
import re2

from .errors import SerializationError

MAX_KEY_LENGTH = 255


MAX_DEPTH = 100
"""Deepest nesting of lists and dicts accepted: deeper values are almost always a
bug (or a cycle), and would otherwise exhaust Python's recursion limit."""


def too_deep() -> SerializationError:
    return SerializationError(f"not JSON-serialisable: nested more than {MAX_DEPTH} levels deep")


def canonical_json(value: Any) -> str:
    """Serialise with sorted keys and no whitespace; reject what JSON cannot carry.
    The size limit is store.storable's."""
    return parsed_json(value)[0]


def parsed_json(value: Any) -> tuple[str, Any]:
    """(canonical JSON of `value`, a fresh copy of `value` parsed back from it, or None).

    One serialisation serves the fingerprint, the stored text and the caller's copy.
    orjson writes it when its text is provably the reference's (_fast); otherwise the
    reference serialiser does, and the copy is None (the caller parses the text)."""
    fast = _fast(value)
    if fast is not None:
        return fast[0].decode(), fast[1]
    return _reference_json(value), None


def _reference_json(value: Any) -> str:
    """The canonical form: the standard library's JSON with sorted keys, compact
    separators and raw UTF-8, after _check names what JSON cannot carry."""
    _check(value, 0)
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        text.encode()  # json.dumps writes a lone surrogate as it is: refuse it here
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise SerializationError(
            f"not JSON-serialisable: {bad!r} is a lone surrogate, not a Unicode character"
        ) from None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"not JSON-serialisable: {exc}") from None
    return text


# orjson, held to the reference: every type it would turn into something the reference
# refuses or writes otherwise goes to `default` (none given: an error, and the
# reference takes over). Subclasses of str/int/dict/list go there too.
_ORJSON = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_ORJSON_DEPTH = 254  # the most containers orjson nests before it refuses
_PAD = _ORJSON_DEPTH - MAX_DEPTH
# A float orjson may write otherwise than repr(): in exponent form, or below 1e-4
# written out (orjson writes 1e-5 as 0.00001, 1e-06 as 1e-6; every other finite float
# exactly as repr() does). Text in strings that looks like one only costs the fast path.
_EXPONENT = re2.compile(rb"[0-9]e[-+]")
_padding = threading.local()


def _fast(value: Any) -> tuple[bytes, Any] | None:
    """orjson's text of `value` and its parse, when that text is the reference's.

    It is not when orjson refuses (non-str keys, integers beyond 64 bits, lone
    surrogates, other types: the reference then gives its own error or text), when a
    float may be written otherwise (see _EXPONENT), or when parsing the text back
    does not give an equal value: NaN and infinities (orjson writes null), tuples,
    UUIDs and enums (which the reference refuses). Depth is held to MAX_DEPTH by
    orjson's own limit: the value is serialised inside _PAD nested lists, so a deeper
    value makes orjson refuse."""
    outer, inner = _pad()
    inner[0] = value
    try:
        data = orjson.dumps(outer, option=_ORJSON)[_PAD:-_PAD]
    except (orjson.JSONEncodeError, RecursionError):
        return None
    finally:
        inner[0] = None
    # orjson writes every exponent with its sign ("1e+16", "1e-7"), so substring tests
    # (memchr speed) leave RE2 only the texts that may hold one: with a bare "e" test a
    # 20 KB result of prose always paid RE2's 40 us scan.
    if b"0.0000" in data or ((b"e+" in data or b"e-" in data) and _EXPONENT.search(data)):
        return None
    parsed = orjson.loads(data)
    try:
        same = parsed == value
    except Exception:  # a foreign __eq__: let the reference decide
        return None
    return (data, parsed) if same else None


def _pad() -> tuple[list[Any], list[Any]]:
    """This thread's _PAD nested lists (built once): the outermost and the innermost."""
    kept = getattr(_padding, "lists", None)
    if kept is None:
        inner: list[Any] = [None]
        outer = inner
        for _ in range(_PAD - 1):
            outer = [outer]
        kept = _padding.lists = (outer, inner)
    return kept


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
    fast = _fast(value)
    data = fast[0] if fast is not None else _reference_json(value).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def idempotency_key(run_id: str, step_id: str, tool: str, args: dict[str, Any]) -> str:
    key = f"{run_id}:{step_id}:{tool}:{fingerprint(args)}"
    if len(key) > MAX_KEY_LENGTH:
        raise SerializationError(f"idempotency key longer than {MAX_KEY_LENGTH} characters")
    return key
