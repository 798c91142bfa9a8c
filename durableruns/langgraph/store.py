"""The SQL behind the LangGraph savers: one place that reads and writes the
LangGraph tables (Django ORM, so it stores in the configured database).

A thread is a Run of kind "langgraph". Here (the ORM path: SQLite, a racing first
checkpoint, interrupts and resumes) every write first moves the Run (one conditional
UPDATE): it is the fence, so a cancelled or redacted thread refuses further
checkpoints, and it keeps the derived status the dashboard shows. The one-statement
path (sql.py) locks the Run instead and writes it only when the status changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from durableruns.langgraph import sql
from durableruns.langgraph.serde import printable, thread_bytes
from durableruns.models import (
    Approval,
    LangGraphBlob,
    LangGraphCheckpoint,
    LangGraphThread,
    LangGraphWrite,
    Run,
)

RUNNING = Run.Status.RUNNING
INTERRUPTED = Run.Status.AWAITING_APPROVAL
IDLE = Run.Status.SUCCEEDED
FAILED = Run.Status.FAILED


# The decider of an approval whose interrupt the graph's caller answered directly.
ANSWERED_OUTSIDE = "langgraph"


class ThreadClosed(Exception):
    """The thread was cancelled or redacted in durableruns: LangGraph may not write to it."""


def run_id_for(thread_id: str) -> str:
    return "lg-" + hashlib.sha256(thread_bytes(thread_id)).hexdigest()[:48]


def touch(
    thread_id: str,
    *,
    status: str | None = None,
    graph: str = "",
    owner: str = "",
) -> str:
    """Record activity on the thread (creating its Run the first time); returns the Run id.

    `owner` is the lease owner when a worker resumes the thread: its writes are
    accepted only while it holds the lease, and each one extends it.
    Raises ThreadClosed if the thread was cancelled or redacted, or the lease lost."""
    run_id = run_id_for(thread_id)
    updates: dict[str, Any] = {"updated_at": Now()}
    if status:
        updates["status"] = status
        updates["finished_at"] = None if status == RUNNING else Now()
    open_thread = Run.objects.filter(
        pk=run_id, kind=Run.Kind.LANGGRAPH, redacted_at__isnull=True
    ).exclude(status=Run.Status.CANCELLED)
    if owner:
        ttl = timedelta(seconds=settings.DURABLERUNS_LANGGRAPH_LEASE_TTL)
        updates["lease_expires_at"] = Now() + ttl
        if not open_thread.filter(lease_owner=owner).update(**updates):
            raise ThreadClosed(
                f"thread {printable(thread_id, 80)!r}: this worker's lease was lost or the "
                "thread was closed; another worker continues it"
            )
        return run_id
    # Three tries: another connection may be creating the thread's Run at this moment.
    for _ in range(3):
        if open_thread.update(**updates):
            return run_id
        existing = Run.objects.filter(pk=run_id).values("kind", "status", "redacted_at").first()
        if existing is None:
            _create(run_id, thread_id, graph)
        elif refusal := _refusal(thread_id, existing):
            raise ThreadClosed(refusal)
    raise ThreadClosed(f"thread {printable(thread_id, 80)!r} could not be recorded")


def _refusal(thread_id: str, existing: dict[str, Any]) -> str:
    name = printable(thread_id, 80)
    if existing["kind"] != Run.Kind.LANGGRAPH:
        return f"thread {name!r} collides with a native durableruns run"
    if existing["redacted_at"] is not None:
        return f"thread {name!r} was redacted in durableruns: its state is gone, it cannot resume"
    if existing["status"] == Run.Status.CANCELLED:
        return f"thread {name!r} was cancelled in durableruns: it accepts no further checkpoints"
    return ""


def _create(run_id: str, thread_id: str, graph: str) -> None:
    with transaction.atomic():
        Run.objects.bulk_create(
            [
                Run(
                    id=run_id,
                    kind=Run.Kind.LANGGRAPH,
                    agent=graph or "langgraph",
                    agent_version="",
                    input={"thread_id": printable(thread_id)},
                    status=RUNNING,
                    max_steps=0,
                    max_duration_seconds=0,
                    started_at=None,
                )
            ],
            ignore_conflicts=True,
        )
        LangGraphThread.objects.bulk_create(
            [LangGraphThread(run_id=run_id, thread_id_bytes=thread_bytes(thread_id))],
            ignore_conflicts=True,
        )
    Run.objects.filter(pk=run_id, started_at__isnull=True).update(started_at=Now())


def put_checkpoint(
    thread_id: str,
    ns: str,
    row: dict[str, Any],
    blobs: Sequence[tuple[str, str, str, bytes | None]],
    *,
    graph: str = "",
    owner: str = "",
) -> None:
    """Store one checkpoint row and the channel blobs new in it, atomically: one
    statement on Postgres (sql.py), a transaction here when that statement's fence
    refused (a racing first checkpoint, or a closed thread, which raises) or on SQLite."""
    if sql.put_checkpoint(
        run_id_for(thread_id), thread_bytes(thread_id), ns, row, blobs, graph=graph, owner=owner
    ):
        return
    top = ns == ""
    with transaction.atomic():
        status = _status_of(thread_id, row) if top else None
        run_id = touch(thread_id, status=status, graph=graph, owner=owner)
        if blobs:
            LangGraphBlob.objects.bulk_create(
                [
                    LangGraphBlob(
                        thread_id=run_id, checkpoint_ns=ns, channel=c, version=v, type=t, blob=b
                    )
                    for c, v, t, b in blobs
                ],
                ignore_conflicts=True,
            )
        LangGraphCheckpoint.objects.bulk_create(
            [LangGraphCheckpoint(thread_id=run_id, checkpoint_ns=ns, **row)],
            update_conflicts=True,
            unique_fields=["thread", "checkpoint_ns", "checkpoint_id"],
            update_fields=[k for k in row if k != "checkpoint_id"],
        )


def _close_answered_approvals(run_id: str, checkpoint_id: str, task_ids: set[str]) -> None:
    """The graph's caller answered these tasks' interrupts with Command(resume=...)
    directly: their approvals leave the inbox (recorded as answered by langgraph)."""
    ids = set()
    for task in interrupted_tasks(run_id, [checkpoint_id]):
        if task.task_id in task_ids:
            ids.update(task.interrupt_ids)
    if not ids:
        return
    Approval.objects.filter(
        run_id=run_id, state=Approval.State.PENDING, interrupt_id__in=ids
    ).update(
        state=Approval.State.EXPIRED,
        decision=Approval.Decision.EXPIRE,
        decider_name=ANSWERED_OUTSIDE,
        comment="answered outside durableruns: the graph was resumed by its caller",
        decided_at=Now(),
    )


@dataclass(frozen=True)
class InterruptedTask:
    """A root task that called interrupt() at a checkpoint, and the interrupts' ids."""

    checkpoint_id: str
    task_id: str
    node: str
    interrupt_ids: frozenset[str]


def interrupted_tasks(run_id: str, checkpoint_ids: Sequence[str]) -> list[InterruptedTask]:
    """The tasks of these root checkpoints that wrote an interrupt (decoded safely)."""
    from durableruns.langgraph.render import node_of, value

    tasks = []
    for checkpoint_id, task_id, task_path, kind, blob in (
        LangGraphWrite.objects.filter(
            thread_id=run_id, checkpoint_ns="", checkpoint_id__in=checkpoint_ids
        )
        .filter(channel="__interrupt__")
        .values_list("checkpoint_id", "task_id", "task_path", "type", "blob")
    ):
        shown = value(kind, blob)
        ids = frozenset(
            str(item["value"].get("id", ""))
            for item in (shown if isinstance(shown, list) else [shown])
            if isinstance(item, dict) and isinstance(item.get("value"), dict)
        )
        tasks.append(InterruptedTask(checkpoint_id, task_id, node_of(task_path), ids))
    return tasks


def _status_of(thread_id: str, row: dict[str, Any]) -> str:
    """A new root checkpoint's status. LangGraph saves checkpoints in the background,
    so a task's error or interrupt may already be recorded against it, or against a
    later checkpoint whose step ran before this one was saved (sql._HELD_BY_WRITES)."""
    special: dict[str, set[str]] = {}
    for checkpoint_id, channel in LangGraphWrite.objects.filter(
        thread_id=run_id_for(thread_id),
        checkpoint_ns="",
        checkpoint_id__gte=row["checkpoint_id"],
        idx__lt=0,
    ).values_list("checkpoint_id", "channel"):
        special.setdefault(checkpoint_id, set()).add(channel)
    for _, channels in sorted(special.items(), reverse=True):  # the newest decides
        if "__error__" in channels:
            return FAILED
        if "__interrupt__" in channels and "__resume__" not in channels:
            return INTERRUPTED
    return RUNNING if row["next_nodes"] else IDLE


def put_writes(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    rows: Sequence[dict[str, Any]],
    status: str | None,
    approvals: Sequence[dict[str, Any]] = (),
    owner: str = "",
    graph: str = "",
) -> None:
    """Store a task's writes. Special writes (error, interrupt, resume: negative idx)
    replace what the task wrote before; a regular write re-sent keeps the first.

    A task's regular writes (most calls) take one INSERT: they change no status, and
    the fence is checked when LangGraph checkpoints them (put_checkpoint). On
    Postgres, writes that move the thread (a status, a worker's lease) are one
    statement too; interrupts and resumes, which open or close approvals, take the
    transaction below."""
    fast = _one_statement_writes(thread_id, ns, checkpoint_id, rows, status, approvals, owner)
    if fast is not None:
        try:
            if sql.put_writes(*fast[0], **fast[1]):
                return
        except IntegrityError:
            pass  # the thread's first checkpoint is not stored yet: created below
    resumed = {r["task_id"] for r in rows if r["channel"] == "__resume__"}
    if _unfenced(rows, status, owner) and not approvals and connection.vendor != "postgresql":
        try:
            LangGraphWrite.objects.bulk_create(
                [
                    LangGraphWrite(
                        thread_id=run_id_for(thread_id),
                        checkpoint_ns=ns,
                        checkpoint_id=checkpoint_id,
                        **r,
                    )
                    for r in rows
                ],
                ignore_conflicts=True,
            )
            return
        except IntegrityError:
            pass  # the thread's first checkpoint is not stored yet: create the thread below
    with transaction.atomic():
        # LangGraph may store a task's writes before the thread's first checkpoint
        # (durability "async"): then they create its Run, which must name the graph.
        run_id = touch(thread_id, status=status if ns == "" else None, graph=graph, owner=owner)
        objs = [
            LangGraphWrite(thread_id=run_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id, **r)
            for r in rows
        ]
        special = [o for o in objs if o.idx < 0]
        plain = [o for o in objs if o.idx >= 0]
        if special:
            LangGraphWrite.objects.bulk_create(
                special,
                update_conflicts=True,
                unique_fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                update_fields=["channel", "type", "blob", "task_path"],
            )
        if plain:
            LangGraphWrite.objects.bulk_create(plain, ignore_conflicts=True)
        if resumed and ns == "":
            _close_answered_approvals(run_id, checkpoint_id, resumed)
        if approvals:
            from durableruns.langgraph.interrupts import open_approvals

            open_approvals(run_id, list(approvals))


def _one_statement_writes(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    rows: Sequence[dict[str, Any]],
    status: str | None,
    approvals: Sequence[dict[str, Any]],
    owner: str,
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """sql.put_writes's arguments, or None when the writes open or close approvals
    (an interrupt, a resume), which take the transaction in put_writes."""
    if approvals or any(r["channel"] == "__resume__" for r in rows):
        return None
    return (
        (run_id_for(thread_id), ns, checkpoint_id, rows),
        {
            "status": status if ns == "" else None,
            "owner": owner,
            "fenced": not _unfenced(rows, status, owner),
        },
    )


def _unfenced(rows: Sequence[dict[str, Any]], status: str | None, owner: str) -> bool:
    """A task's regular writes: no status to set, no worker's lease, no special write.
    They need no fence (it is checked when LangGraph checkpoints them)."""
    return not owner and status is None and all(r["idx"] >= 0 for r in rows)


async def aput_checkpoint(
    thread_id: str,
    ns: str,
    row: dict[str, Any],
    blobs: Sequence[tuple[str, str, str, bytes | None]],
    *,
    graph: str = "",
    owner: str = "",
) -> bool:
    """put_checkpoint's one statement on the event loop's connection; False when the
    caller must take put_checkpoint (not Postgres, or the fence refused)."""
    return bool(
        await sql.aput_checkpoint(
            run_id_for(thread_id), thread_bytes(thread_id), ns, row, blobs, graph=graph, owner=owner
        )
    )


async def aput_writes(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    rows: Sequence[dict[str, Any]],
    status: str | None,
    approvals: Sequence[dict[str, Any]] = (),
    owner: str = "",
) -> bool:
    """put_writes's one statement on the event loop's connection; False when the
    caller must take put_writes."""
    fast = _one_statement_writes(thread_id, ns, checkpoint_id, rows, status, approvals, owner)
    if fast is None:
        return False
    try:
        return bool(await sql.aput_writes(*fast[0], **fast[1]))
    except IntegrityError:
        return False


async def afetch(
    thread_id: str | None,
    ns: str | None,
    checkpoint_id: str | None = None,
    before: str | None = None,
    limit: int | None = None,
) -> list[tuple[Any, ...]] | None:
    """fetch's one query on the event loop's connection; None when not Postgres."""
    run_id = run_id_for(thread_id) if thread_id is not None else None
    return await sql.afetch(run_id, ns, checkpoint_id, before, limit)


def fetch(
    thread_id: str | None,
    ns: str | None,
    checkpoint_id: str | None = None,
    before: str | None = None,
    limit: int | None = None,
) -> list[tuple[Any, ...]]:
    """Checkpoints newest first with their channel values and pending writes (see
    sql.fetch for the shape): one query on Postgres, three per checkpoint here."""
    run_id = run_id_for(thread_id) if thread_id is not None else None
    found = sql.fetch(run_id, ns, checkpoint_id, before, limit)
    if found is not None:
        return found
    rows = LangGraphCheckpoint.objects.select_related("thread")
    if run_id is not None:
        rows = rows.filter(thread_id=run_id)
    if ns is not None:
        rows = rows.filter(checkpoint_ns=ns)
    if checkpoint_id:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    if before:
        rows = rows.filter(checkpoint_id__lt=before)
    rows = rows.order_by("-checkpoint_id", "thread_id", "checkpoint_ns")
    if limit is not None:
        rows = rows[: max(limit, 0)]
    return [_record(row) for row in rows]


def _record(row: LangGraphCheckpoint) -> tuple[Any, ...]:
    ns = row.checkpoint_ns
    blobs = [
        (b.channel, b.type, b.blob)
        for b in load_blobs(row.thread_id, ns, row.channel_versions)
        if b.type != "empty"
    ]
    writes = [
        (w.task_id, w.channel, w.type, w.blob)
        for w in load_writes(row.thread_id, ns, row.checkpoint_id)
    ]
    return (
        row.thread.thread_id_bytes,
        ns,
        row.checkpoint_id,
        row.parent_checkpoint_id,
        row.type,
        row.checkpoint,
        row.metadata_type,
        row.metadata,
        blobs,
        writes,
    )


def load_blobs(run_id: str, ns: str, versions: dict[str, str]) -> list[LangGraphBlob]:
    if not versions:
        return []
    wanted = Q()
    for channel, version in versions.items():
        wanted |= Q(channel=channel, version=version)
    return list(LangGraphBlob.objects.filter(wanted, thread_id=run_id, checkpoint_ns=ns))


def load_writes(run_id: str, ns: str, checkpoint_id: str) -> list[LangGraphWrite]:
    return list(
        LangGraphWrite.objects.filter(
            thread_id=run_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id
        ).order_by("task_path", "task_id", "idx")
    )


def delete_thread(thread_id: str) -> None:
    doomed = Run.objects.filter(pk=run_id_for(thread_id), kind=Run.Kind.LANGGRAPH)
    with transaction.atomic():
        # The fence's lock first: a checkpoint being stored is waited for and deleted
        # with the rest, and a later one is refused. Checkpoints have no database
        # foreign key that would catch one left behind (models.py).
        if doomed.select_for_update().values_list("pk", flat=True):
            doomed.delete()


def delete_for_runs(run_ids: Sequence[str]) -> None:
    if not run_ids:
        return
    with transaction.atomic():
        doomed = LangGraphCheckpoint.objects.filter(lg_run_id__in=[str(r) for r in run_ids])
        _delete_checkpoints(doomed)


def _delete_checkpoints(doomed: Any) -> None:
    keys = list(doomed.values_list("thread_id", "checkpoint_ns", "checkpoint_id"))
    if not keys:
        return
    writes = Q()
    for thread, ns, cid in keys:
        writes |= Q(thread_id=thread, checkpoint_ns=ns, checkpoint_id=cid)
    LangGraphWrite.objects.filter(writes).delete()
    doomed.delete()
    for thread in {k[0] for k in keys}:
        _delete_unreferenced_blobs(thread)


def _delete_unreferenced_blobs(run_id: str) -> None:
    referenced = set()
    for ns, versions in LangGraphCheckpoint.objects.filter(thread_id=run_id).values_list(
        "checkpoint_ns", "channel_versions"
    ):
        referenced.update((ns, c, v) for c, v in versions.items())
    stale = [
        pk
        for pk, ns, c, v in LangGraphBlob.objects.filter(thread_id=run_id).values_list(
            "pk", "checkpoint_ns", "channel", "version"
        )
        if (ns, c, v) not in referenced
    ]
    LangGraphBlob.objects.filter(pk__in=stale).delete()


def copy_thread(
    source: str, target: str, *, up_to: str | None = None, without_tasks: Sequence[str] = ()
) -> str:
    """Copy the source thread's checkpoints (all, or those of `up_to` and its
    ancestors in the root namespace, with every subgraph namespace) into `target`.
    The writes of `without_tasks` at `up_to` are left behind: LangGraph runs those
    tasks again in the copy (a fork asks their interrupts again)."""
    src = run_id_for(source)
    with transaction.atomic():
        checkpoints = list(LangGraphCheckpoint.objects.filter(thread_id=src))
        if not checkpoints:
            return run_id_for(target)
        if up_to is not None:
            checkpoints = _ancestry(checkpoints, up_to)
        dst = touch(target)
        kept = {(c.checkpoint_ns, c.checkpoint_id) for c in checkpoints}
        dropped = set(without_tasks)
        for row in checkpoints:
            row.pk, row.thread_id = None, dst
        LangGraphCheckpoint.objects.bulk_create(checkpoints, ignore_conflicts=True)
        writes = [
            w
            for w in LangGraphWrite.objects.filter(thread_id=src)
            if (w.checkpoint_ns, w.checkpoint_id) in kept
            and not (w.checkpoint_ns == "" and w.checkpoint_id == up_to and w.task_id in dropped)
        ]
        for w in writes:
            w.pk, w.thread_id = None, dst
        LangGraphWrite.objects.bulk_create(writes, ignore_conflicts=True)
        blobs = list(LangGraphBlob.objects.filter(thread_id=src))
        for b in blobs:
            b.pk, b.thread_id = None, dst
        LangGraphBlob.objects.bulk_create(blobs, ignore_conflicts=True)
        if up_to is not None:
            _delete_unreferenced_blobs(dst)
        return dst


def root_ancestry(run_id: str, checkpoint_id: str) -> list[str]:
    """`checkpoint_id` and its ancestors in the root namespace, newest first."""
    parents = dict(
        LangGraphCheckpoint.objects.filter(thread_id=run_id, checkpoint_ns="").values_list(
            "checkpoint_id", "parent_checkpoint_id"
        )
    )
    chain, cursor = [], checkpoint_id
    while cursor in parents and cursor not in chain:
        chain.append(cursor)
        cursor = parents[cursor]
    return chain


def _ancestry(checkpoints: list[LangGraphCheckpoint], up_to: str) -> list[LangGraphCheckpoint]:
    root = {c.checkpoint_id: c for c in checkpoints if c.checkpoint_ns == ""}
    chain, cursor = [], root.get(up_to)
    while cursor is not None:
        chain.append(cursor)
        cursor = root.get(cursor.parent_checkpoint_id)
    # Subgraph checkpoints carry their own ids; keep those written no later than the fork point.
    nested = [c for c in checkpoints if c.checkpoint_ns != "" and c.checkpoint_id <= up_to]
    return chain + nested


def prune(thread_ids: Sequence[str], strategy: str) -> None:
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"unknown prune strategy {strategy!r}")
    with transaction.atomic():
        for thread_id in thread_ids:
            run_id = run_id_for(thread_id)
            rows = LangGraphCheckpoint.objects.filter(thread_id=run_id)
            if strategy == "keep_latest":
                latest = {}
                for pk, ns, cid in rows.values_list("pk", "checkpoint_ns", "checkpoint_id"):
                    if ns not in latest or cid > latest[ns][1]:
                        latest[ns] = (pk, cid)
                rows = rows.exclude(pk__in=[pk for pk, _ in latest.values()])
            _delete_checkpoints(rows)
