"""LangGraph values for the dashboard, decoded WITHOUT LangGraph's serializer.

LangGraph's msgpack extension types name a Python class (module, name, arguments)
that its serializer imports and calls: decoding stored data that way can execute
code. Here an extension becomes a plain description ({"__class__": "module.Name",
"value": arguments}) and nothing is imported; pickled values are never loaded.
Only plain data comes out: dicts, lists, strings, numbers, booleans, None.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import ormsgpack

from durableruns.langgraph.serde import printable
from durableruns.models import LangGraphBlob, LangGraphCheckpoint, LangGraphWrite, Run

MAX_BLOB = 256 * 1024
MAX_DEPTH = 40
MAX_ITEMS = 200
MAX_TEXT = 2000
HIDDEN_CHANNELS = ("__start__", "branch:to:")

_CLASS_EXTS = {0, 1, 2, 3, 4, 5}  # constructor / method / pydantic: (module, name, args, ...)
_NUMPY_EXT = 6
_DELTA_EXT = 7


def value(kind: str, data: bytes | memoryview | None) -> Any:
    """One stored value (type tag + bytes) as plain, bounded data for a page."""
    data = bytes(data or b"")
    if kind in ("null", "empty"):
        return None
    if len(data) > MAX_BLOB:
        return f"({len(data)} bytes of {kind}: too large to show)"
    if kind in ("bytes", "bytearray"):
        return f"({len(data)} bytes)"
    try:
        if kind == "json":
            return _plain(json.loads(data), 0)
        if kind == "msgpack":
            return _plain(_unpack(data), 0)
    except (ValueError, TypeError, RecursionError, ormsgpack.MsgpackDecodeError):
        return f"({len(data)} bytes of {kind}: undecodable)"
    return f"({len(data)} bytes of {kind}: not shown)"


def _unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data, ext_hook=_describe, option=ormsgpack.OPT_NON_STR_KEYS)


def _describe(code: int, data: bytes) -> Any:
    if code == _DELTA_EXT:
        return _unpack(data)
    if code == _NUMPY_EXT:
        return "(numpy array)"
    if code in _CLASS_EXTS:
        parts = _unpack(data)
        if isinstance(parts, (list, tuple)) and len(parts) >= 3:
            return {"__class__": f"{parts[0]}.{parts[1]}", "value": parts[2]}
    return f"(extension type {code})"


def _plain(item: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return "(nested too deeply)"
    if item is None or isinstance(item, (bool, int, float)):
        return item
    if isinstance(item, str):
        # Lone surrogates (from JSON escapes) cannot be encoded into a page: escape them.
        text = item[:MAX_TEXT].encode("utf-8", "backslashreplace").decode("utf-8")
        return text if len(item) <= MAX_TEXT else text + f"… ({len(item)} chars)"
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"({len(item)} bytes)"
    if isinstance(item, dict):
        pairs = list(item.items())[:MAX_ITEMS]
        return {_key(k): _plain(v, depth + 1) for k, v in pairs}
    if isinstance(item, (list, tuple, set, frozenset)):
        return [_plain(v, depth + 1) for v in list(item)[:MAX_ITEMS]]
    return f"({type(item).__name__})"


def _key(key: Any) -> str:
    return key if isinstance(key, str) else json.dumps(_plain(key, MAX_DEPTH), default=str)


def node_of(task_path: str) -> str:
    """`~__pregel_pull, lookup` → `lookup` (the node a pull task ran)."""
    return task_path.rsplit(", ", 1)[-1] if task_path else ""


def thread_view(run: Run, *, limit: int = 100) -> dict[str, Any]:
    """The node timeline of a thread: checkpoints per namespace (newest first), the
    writes of each (node, channels, errors, interrupts), the state there, branches."""
    rows = list(
        LangGraphCheckpoint.objects.filter(thread_id=run.pk)
        .defer("metadata")
        .order_by("-checkpoint_id")[:limit]
    )
    children: dict[tuple[str, str], int] = defaultdict(int)
    for row in rows:
        children[(row.checkpoint_ns, row.parent_checkpoint_id)] += 1
    writes = _writes_by_checkpoint(run.pk, rows)
    blobs = _blobs(run.pk, rows)
    namespaces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        key = (row.checkpoint_ns, row.checkpoint_id)
        namespaces[row.checkpoint_ns].append(
            {
                "id": row.checkpoint_id,
                "parent": row.parent_checkpoint_id,
                "step": row.step,
                "source": row.source,
                "next": row.next_nodes,
                "created_at": row.created_at,
                "branches": children.get(key, 0),
                "fork_point": children.get(key, 0) > 1,
                "tasks": writes.get(key, []),
                "state": _state(row, blobs),
            }
        )
    return {
        "thread_id": printable(run.langgraph_thread.thread_id),
        "status": run.status_label,
        "namespaces": sorted(namespaces.items()),
        "truncated": len(rows) == limit,
    }


def _state(row: LangGraphCheckpoint, blobs: dict[tuple[str, str, str], Any]) -> dict[str, Any]:
    """The channel values at a checkpoint: small scalars are stored in the checkpoint
    itself (decoded here as any stored value), the others in the blob table."""
    decoded = value(row.type, row.checkpoint)
    inline = decoded.get("channel_values") if isinstance(decoded, dict) else None
    inline = inline if isinstance(inline, dict) else {}
    state = {}
    for channel, version in sorted(row.channel_versions.items()):
        if channel.startswith(HIDDEN_CHANNELS):
            continue
        key = (row.checkpoint_ns, channel, version)
        state[channel] = blobs[key] if key in blobs else inline.get(channel)
    return state


def _writes_by_checkpoint(run_id: str, rows: list[LangGraphCheckpoint]) -> dict:
    ids = {r.checkpoint_id for r in rows}
    tasks: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for w in LangGraphWrite.objects.filter(thread_id=run_id, checkpoint_id__in=ids).order_by(
        "task_path", "task_id", "idx"
    ):
        task = tasks[(w.checkpoint_ns, w.checkpoint_id)].setdefault(
            w.task_id, {"node": node_of(w.task_path), "task_id": w.task_id, "writes": []}
        )
        task["writes"].append(
            {"channel": w.channel, "value": value(w.type, w.blob), "special": w.idx < 0}
        )
    return {key: list(found.values()) for key, found in tasks.items()}


def _blobs(run_id: str, rows: list[LangGraphCheckpoint]) -> dict[tuple[str, str, str], Any]:
    wanted = {
        (r.checkpoint_ns, c, v)
        for r in rows
        for c, v in r.channel_versions.items()
        if not c.startswith(HIDDEN_CHANNELS)
    }
    found = {}
    for b in LangGraphBlob.objects.filter(
        thread_id=run_id, channel__in={c for _, c, _ in wanted}
    ).iterator(chunk_size=200):
        key = (b.checkpoint_ns, b.channel, b.version)
        if key in wanted:
            found[key] = value(b.type, b.blob)
    return found
