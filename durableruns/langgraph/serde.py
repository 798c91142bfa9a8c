"""The leaf of durableruns.langgraph: how stored values are (de)serialised, and the
small text helpers every other module here shares. It imports nothing from the
package, so nothing here can close an import cycle (pyproject.toml's contracts).

LangGraph's msgpack extension types name a Python callable (module, name, arguments)
that its default serializer imports and calls, whatever it is: a checkpoint row
naming `os.system` runs a command. Stored values are untrusted input (an import, a
row written by anyone with database access), so every value is checked against an
allowlist before it is decoded: LangGraph's own safe set plus
DURABLERUNS_LANGGRAPH_ALLOWED_TYPES. A value naming anything else is refused with an
error that names the class and the setting, never imported and never replaced by a
guess.
"""

from __future__ import annotations

import json
from typing import Any

import ormsgpack
from django.conf import settings
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

# Type tags whose bytes are returned as they are, never decoded.
RAW_KINDS = ("null", "empty", "bytes", "bytearray")
_CLASS_EXTS = {0, 1, 2, 4, 5}  # constructor (one, positional, keyword args), pydantic v1/v2
_METHOD_EXT = 3  # (module, name, argument, method)
_NUMPY_EXT = 6
_DELTA_EXT = 7
_MAX_JSON_DEPTH = 200


class UnsafeValue(ValueError):
    """A stored value names a class outside the allowlist, or cannot be decoded."""


def thread_bytes(thread_id: str) -> bytes:
    return str(thread_id).encode("utf-8", "surrogatepass")


def printable(text: str, limit: int = 300) -> str:
    """Text fit for a JSON column and a page: control characters and lone surrogates
    escaped, length bounded."""
    if len(text) <= limit and text.isprintable():  # lone surrogates are not printable
        return text
    out = []
    for ch in text[:limit]:
        code = ord(ch)
        out.append(ch if ch.isprintable() and not 0xD800 <= code <= 0xDFFF else f"\\u{code:04x}")
    return "".join(out) + ("…" if len(text) > limit else "")


def configured_types() -> set[tuple[str, str]]:
    """DURABLERUNS_LANGGRAPH_ALLOWED_TYPES as (module, name) pairs."""
    found = set()
    for dotted in settings.DURABLERUNS_LANGGRAPH_ALLOWED_TYPES:
        module, _, name = dotted.rpartition(".")
        if not module:
            raise ValueError(f"DURABLERUNS_LANGGRAPH_ALLOWED_TYPES: {dotted!r} is not module.Name")
        found.add((module, name))
    return found


def allowed_types() -> set[tuple[str, ...]]:
    """Every (module, name) a stored value may name."""
    return set(SAFE_MSGPACK_TYPES) | configured_types()


def check(kind: str, data: bytes, allowed: set[tuple[str, ...]] | frozenset) -> None:
    """Raise UnsafeValue unless decoding (kind, data) can only build allowed types."""
    if kind in RAW_KINDS:
        return
    if kind == "msgpack":
        _check_msgpack(data, allowed)
    elif kind == "json":
        _check_json(data, allowed)
    else:
        raise UnsafeValue(f"a value of type {printable(kind, 40)!r} is never loaded")


# Every msgpack extension starts with one of these bytes (fixext 1-16, ext 8/16/32): a
# value without any (most plain state) names no class, and is not walked twice.
_EXT_MARKERS = bytes((*range(0xC7, 0xCA), *range(0xD4, 0xD9)))


def _check_msgpack(data: bytes, allowed: set[tuple[str, ...]] | frozenset) -> None:
    if len(data.translate(None, _EXT_MARKERS)) == len(data):  # one C pass, unlike re
        return
    refused: list[str] = []

    def inspect(code: int, inner: bytes) -> None:
        parts = None if code == _NUMPY_EXT else _unpack(inner, inspect)
        reason = _refusal(code, parts, allowed)
        if reason:
            refused.append(reason)
            raise UnsafeValue(reason)  # ormsgpack reports it as "ext_hook failed"

    try:
        _unpack(data, inspect)
    except (ValueError, TypeError) as exc:
        raise UnsafeValue(refused[0] if refused else f"undecodable msgpack ({exc})") from None


def _unpack(data: bytes, hook: Any) -> Any:
    return ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)


def _refusal(code: int, parts: Any, allowed: set[tuple[str, ...]] | frozenset) -> str:
    if code == _DELTA_EXT:
        return ""
    if code == _NUMPY_EXT:
        return "" if ("numpy", "ndarray") in allowed else _not_allowed("numpy.ndarray")
    if not (isinstance(parts, (list, tuple)) and len(parts) >= 3):
        return f"msgpack extension {code} is not a (module, name, value) triple"
    module, name = str(parts[0]), str(parts[1])
    if code == _METHOD_EXT:
        method = str(parts[3]) if len(parts) > 3 else ""
        if (module, name, method) in SAFE_MSGPACK_METHODS:
            return ""
        return _not_allowed(f"{module}.{name}.{method}")
    if code in _CLASS_EXTS and (module, name) in allowed:
        return ""
    return _not_allowed(f"{module}.{name}")


def _not_allowed(dotted: str) -> str:
    return (
        f"{printable(dotted, 200)} is not an allowed type "
        "(add it to DURABLERUNS_LANGGRAPH_ALLOWED_TYPES if your graph's state holds it)"
    )


def _check_json(data: bytes, allowed: set[tuple[str, ...]] | frozenset) -> None:
    """Old-format (pre-msgpack) values: LangChain constructor envelopes name classes."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise UnsafeValue("undecodable json") from None
    stack = [(doc, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_JSON_DEPTH:
            raise UnsafeValue(f"json nested deeper than {_MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            if item.get("type") == "constructor" and "lc" in item:
                ident = item.get("id")
                ok = item.get("lc") == 2 and isinstance(ident, list) and len(ident) >= 2
                if not ok or (".".join(map(str, ident[:-1])), str(ident[-1])) not in allowed:
                    raise UnsafeValue(_not_allowed(".".join(map(str, ident or []))))
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's serializer with its strict allowlist always on, whatever
    LANGGRAPH_STRICT_MSGPACK says, no pickle, and a refusal (not a silent stand-in
    value) for anything outside the allowlist."""

    def __init__(self) -> None:
        super().__init__(
            pickle_fallback=False,
            allowed_json_modules=None,
            allowed_msgpack_modules=tuple(configured_types()) or None,
        )

    def allowed(self) -> frozenset[tuple[str, ...]]:
        # with_msgpack_allowlist() (LangGraph's schema-derived types) replaces the set
        # on a copy: rebuild when it is not the one this was built from.
        extra = self._allowed_msgpack_modules
        cached = getattr(self, "_allowed_cache", None)
        if cached is None or cached[0] is not extra:
            merged = SAFE_MSGPACK_TYPES | (extra if isinstance(extra, set) else set())
            cached = self._allowed_cache = (extra, frozenset(merged))
        return cached[1]

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, blob = data
        check(kind, bytes(blob), self.allowed())
        return super().loads_typed(data)


def require_strict(serde: Any) -> Any:
    """The serializer a saver may use: ours, or ours inside LangGraph's encryption."""
    inner = serde.serde if isinstance(serde, EncryptedSerializer) else serde
    if not isinstance(inner, StrictSerializer):
        raise TypeError(
            "DurableRunsSaver decodes stored values only with "
            "durableruns.langgraph.serde.StrictSerializer (or an EncryptedSerializer "
            f"around it), not {type(inner).__name__}: LangGraph's default imports and "
            "calls any class a checkpoint names"
        )
    return serde
