"""Export a LangGraph thread to one JSON document, and import it (under the same or
another thread id). Values stay in LangGraph's serialized form, base64-encoded:
the document round-trips exactly, and nothing is decoded on the way.

A document is untrusted input: every value is checked against the serializer's
allowlist (serde.py) before anything is stored, and an import only ever creates a
new thread: appending checkpoints to an existing one would rewrite its history."""

from __future__ import annotations

import base64
from typing import Any

from django.db import DataError, IntegrityError, transaction

from durableruns.langgraph import store
from durableruns.langgraph.serde import UnsafeValue, allowed_types, check, printable
from durableruns.models import LangGraphBlob, LangGraphCheckpoint, LangGraphWrite, Run

FORMAT = "durableruns.langgraph.thread/1"
_CHECKPOINT = ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "metadata_type")
_CHECKPOINT_JSON = ("channel_versions", "next_nodes", "step", "source", "lg_run_id")
_BLOB = ("checkpoint_ns", "channel", "version", "type")
_WRITE = ("checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", "type")


class ImportRefused(ValueError):
    """The document is not a thread export this version can read."""


def _b64(data: Any) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode()


def _unb64(text: Any, where: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise ImportRefused(f"{where}: not base64") from None


def export_thread(run: Run) -> dict[str, Any]:
    if run.kind != Run.Kind.LANGGRAPH:
        raise ImportRefused(f"run {run.pk} is not a LangGraph thread")
    rows = LangGraphCheckpoint.objects.filter(thread_id=run.pk).order_by("checkpoint_id")
    return {
        "format": FORMAT,
        "thread_id": _b64(run.langgraph_thread.thread_id_bytes),
        "graph": run.agent,
        "checkpoints": [
            {
                **{k: getattr(c, k) for k in _CHECKPOINT + _CHECKPOINT_JSON},
                "checkpoint": _b64(c.checkpoint),
                "metadata": _b64(c.metadata),
            }
            for c in rows
        ],
        "blobs": [
            {**{k: getattr(b, k) for k in _BLOB}, "blob": _b64(b.blob)}
            for b in LangGraphBlob.objects.filter(thread_id=run.pk).order_by("pk")
        ],
        "writes": [
            {**{k: getattr(w, k) for k in _WRITE}, "blob": _b64(w.blob)}
            for w in LangGraphWrite.objects.filter(thread_id=run.pk).order_by("pk")
        ],
    }


def import_thread(doc: Any, *, thread_id: str | None = None) -> str:
    """Store the exported thread (as `thread_id` if given); returns the Run id.
    Refused (ImportRefused) if the thread exists or a value names a disallowed type."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ImportRefused(f"not a {FORMAT} document")
    if thread_id is None:
        raw = _unb64(doc.get("thread_id"), "thread_id") or b""
        thread_id = raw.decode("utf-8", "surrogatepass")
    checkpoints = [
        _row(c, _CHECKPOINT + _CHECKPOINT_JSON, ("checkpoint", "metadata"), "checkpoint")
        for c in _list(doc, "checkpoints")
    ]
    blobs = [_row(b, _BLOB, ("blob",), "blob") for b in _list(doc, "blobs")]
    writes = [_row(w, _WRITE, ("blob",), "write") for w in _list(doc, "writes")]
    _check_values(checkpoints, blobs, writes)
    with transaction.atomic():
        _refuse_existing(thread_id)
        run_id = store.touch(thread_id, graph=str(doc.get("graph") or ""))
        # A concurrent import of the same thread id committed first: refuse this one.
        if LangGraphCheckpoint.objects.filter(thread_id=run_id).exists():
            _refuse_existing(thread_id, exists=True)
        try:
            LangGraphCheckpoint.objects.bulk_create(
                [LangGraphCheckpoint(thread_id=run_id, **c) for c in checkpoints],
                ignore_conflicts=True,
            )
            LangGraphBlob.objects.bulk_create(
                [LangGraphBlob(thread_id=run_id, **b) for b in blobs], ignore_conflicts=True
            )
            LangGraphWrite.objects.bulk_create(
                [LangGraphWrite(thread_id=run_id, **w) for w in writes], ignore_conflicts=True
            )
        except (TypeError, ValueError, DataError, IntegrityError) as exc:
            raise ImportRefused(f"a row does not fit: {exc}") from None
    return run_id


def _refuse_existing(thread_id: str, *, exists: bool = False) -> None:
    if exists or Run.objects.filter(pk=store.run_id_for(thread_id)).exists():
        raise ImportRefused(
            f"thread {printable(thread_id, 80)!r} already exists here: an import "
            "creates a new thread (give another --thread-id)"
        )


def _check_values(checkpoints: list[dict], blobs: list[dict], writes: list[dict]) -> None:
    allowed = allowed_types()
    values = [
        *(
            (f"checkpoints[{i}].checkpoint", c["type"], c["checkpoint"])
            for i, c in enumerate(checkpoints)
        ),
        *(
            (f"checkpoints[{i}].metadata", c["metadata_type"], c["metadata"])
            for i, c in enumerate(checkpoints)
        ),
        *((f"blobs[{i}]", b["type"], b["blob"]) for i, b in enumerate(blobs)),
        *((f"writes[{i}]", w["type"], w["blob"]) for i, w in enumerate(writes)),
    ]
    for where, kind, data in values:
        try:
            check(str(kind), data or b"", allowed)
        except UnsafeValue as exc:
            raise ImportRefused(f"{where}: {exc}") from None


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ImportRefused(f"{key}: a list is required")
    return value


def _row(item: Any, fields: tuple[str, ...], binary: tuple[str, ...], what: str) -> dict:
    if not isinstance(item, dict) or any(k not in item for k in fields + binary):
        raise ImportRefused(f"a {what} lacks one of {', '.join(fields + binary)}")
    row = {k: item[k] for k in fields}
    row.update({k: _unb64(item[k], f"{what}.{k}") for k in binary})
    if not isinstance(row.get("channel_versions", {}), dict):
        raise ImportRefused(f"{what}.channel_versions: an object is required")
    for key, value in row.items():
        if isinstance(value, str) and "\x00" in value:
            raise ImportRefused(f"{what}.{key}: NUL is not allowed")
    return row
