"""The savers' hot path on Postgres: one statement per call.

A checkpoint (the fence, a lock on its Run; the Run's status when it changes; its
new blobs; the checkpoint row; on a thread's first checkpoint the Run and thread
rows) is one data-modifying CTE (and, rarely, a second statement that sets a status
another process moved meanwhile); a task's writes are one upsert; a checkpoint with
its blobs and writes is one query. The ORM path in store.py took four to eleven
statements and a transaction per checkpoint, which made `aput` eight times slower
than AsyncPostgresSaver's. The async saver's statements are prepared (native.py).

Every function returns None when the database is not Postgres (SQLite keeps the
ORM path), and put_checkpoint/put_writes return False when the fence refused the
write: the caller then takes the ORM path, which creates a racing thread or says
why the thread is closed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from functools import cache
from typing import Any

import psycopg
import psycopg.sql
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models.sql import InsertQuery

from durableruns.engine.store import prepared_statements_disabled
from durableruns.langgraph import native
from durableruns.langgraph.serde import printable
from durableruns.models import (
    LangGraphBlob,
    LangGraphCheckpoint,
    LangGraphThread,
    LangGraphWrite,
    Run,
)

RUN = Run._meta.db_table
THREAD = LangGraphThread._meta.db_table
CHECKPOINT = LangGraphCheckpoint._meta.db_table
BLOB = LangGraphBlob._meta.db_table
WRITE = LangGraphWrite._meta.db_table

# A thread accepts writes while it is a langgraph Run, neither cancelled nor
# redacted, and (for a worker resuming it) while that worker holds its lease.
_OPEN = (
    f"{RUN}.id = %(run)s AND {RUN}.kind = 'langgraph' AND {RUN}.redacted_at IS NULL "
    f"AND {RUN}.status <> 'cancelled'"
)
_LEASED = f" AND {RUN}.lease_owner = %(owner)s"
_EXTEND = ", lease_expires_at = STATEMENT_TIMESTAMP() + %(ttl)s::interval"

_CHECKPOINT_COLUMNS = (
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata_type",
    "metadata",
    "channel_versions",
    "next_nodes",
    "step",
    "source",
    "lg_run_id",
)


# Threads this process stored a checkpoint for, with the Run's status as last seen
# here ("" when unsure): their next checkpoints skip the Run's INSERT (a thread
# deleted meanwhile is refused by the fence and recreated by the ORM path), and those
# that keep the status leave the Run's UPDATE out of their statement. Cleared when
# full rather than kept in order: it is only a hint, which the database checks.
_known: dict[str, str] = {}
KNOWN_LIMIT = 10_000


def _db() -> Any:
    db = connections[DEFAULT_DB_ALIAS]
    return db if db.vendor == "postgresql" else None


def _execute(db: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """One round trip on Django's connection (the sync saver, the saver thread), with
    server-side parameters, planned at each call. Not prepared: Django's connection
    is shared, so it cannot take the async connection's enable_seqscan=off, and a
    prepared plan made while the tables were empty (never analyzed: autovacuum off)
    scanned the whole Run table at every checkpoint (2,090 scans for 1,200 puts)."""
    if prepared_statements_disabled(db):
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    db.ensure_connection()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
        cursor.execute(sql, params, prepare=False)
        return cursor.fetchall()


# --- put -------------------------------------------------------------------------


@cache
def _put_sql(top: bool, leased: bool, create: bool, blobs: int, moves: bool) -> str:
    """`moves`: a root checkpoint that may change the thread's status, as far as this
    process knows; the others leave the Run's UPDATE out of the plan (Postgres opened
    the Run's twelve indexes for it even when it changed no row: 0.04 ms of the 0.53 ms
    statement, pgbench)."""
    if leased:
        # A worker resuming the thread extends its lease at every checkpoint: that
        # UPDATE is the fence, and sets a root checkpoint's status with it.
        status = (
            f", status = CASE WHEN held.held THEN {RUN}.status ELSE %(target)s::text END, "
            f"finished_at = CASE WHEN held.held THEN {RUN}.finished_at "
            f"ELSE {_finished_at('target')} END"
            if top
            else ""
        )
        fence = (
            f"{f'held AS (SELECT EXISTS ({_HELD_BY_WRITES}) AS held), ' if top else ''}"
            f"fence AS (UPDATE {RUN} SET updated_at = STATEMENT_TIMESTAMP(){status}{_EXTEND} "
            f"{'FROM held ' if top else ''}WHERE {_OPEN}{_LEASED} "
            f"RETURNING {RUN}.id, {RUN}.status), "
        )
        moved = ""
    else:
        # A row lock, not an UPDATE: a cancel or a redaction committing meanwhile is
        # waited for and then refuses the write, and no new version of the Run row (its
        # twelve indexes) is written per checkpoint. A checkpoint that may move the
        # status takes the lock its UPDATE upgrades to, so two writers cannot deadlock.
        lock = "FOR NO KEY UPDATE" if moves else "FOR SHARE"
        fence = f"fence AS (SELECT id, status FROM {RUN} WHERE {_OPEN} {lock}), "
        # The Run row changes only when the status does: rarely (start, interrupt, end).
        # Found by the parameter, not by a join with the fence: planned on an empty
        # table, the join was a sequential scan of every Run, at every checkpoint.
        # Both conditions are one-time filters, so a checkpoint that keeps the status
        # (most) reads neither the Run again nor the writes.
        moving = f"{RUN}.id = %(run)s AND EXISTS (SELECT FROM fence WHERE {_ELSEWHERE})"
        moved = f"moved AS ({_move_status(moving)}), " if moves else ""
    if create:
        created = (
            f"created AS (%(insert_run)s ON CONFLICT (id) DO NOTHING RETURNING id), "
            f"new_thread AS (INSERT INTO {THREAD} (run_id, thread_id_bytes) "
            f"SELECT id, %(thread_bytes)s FROM created ON CONFLICT DO NOTHING), "
            f"fenced AS (SELECT id FROM fence UNION ALL SELECT id FROM created), "
        )
    else:
        created = "fenced AS (SELECT id FROM fence), "
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _CHECKPOINT_COLUMNS)
    return (
        f"WITH {fence}{moved}{created}"
        f"{_blobs_cte(blobs)}"
        f"saved AS (INSERT INTO {CHECKPOINT} (thread_id, checkpoint_ns, checkpoint_id, "
        f"{', '.join(_CHECKPOINT_COLUMNS)}, created_at) "
        f"SELECT fenced.id, %(ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s, %(type)s, "
        f"%(checkpoint)s::bytea, %(metadata_type)s, %(metadata)s::bytea, "
        f"%(channel_versions)s::jsonb, %(next_nodes)s::jsonb, %(step)s::integer, %(source)s, "
        f"%(lg_run_id)s, STATEMENT_TIMESTAMP() FROM fenced "
        f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET {updates}) "
        f"SELECT count(*), {'COALESCE((SELECT status FROM moved), ' if moved else '('}"
        f"(SELECT status FROM fence)) FROM fenced"
    )


def _blobs_cte(rows: int) -> str:
    if not rows:
        return ""  # small values are inline, in the checkpoint row
    return (
        f"blobs AS (INSERT INTO {BLOB} (thread_id, checkpoint_ns, channel, version, type, blob) "
        f"SELECT fenced.id, %(ns)s, b.c, b.v, b.t, b.b FROM fenced, {_rows(_BLOB_FIELDS, rows)} "
        f"AS b(c, v, t, b) ON CONFLICT DO NOTHING), "
    )


# A root checkpoint's status (its `target`): running while nodes remain, idle when
# none do. Unless a task's error, or its interrupt not yet resumed, is recorded against
# this checkpoint or a later one: put_writes set the status from those, and the
# checkpoint must not undo it. LangGraph saves checkpoints in the background, without
# blocking the next steps' tasks, so the checkpoints of earlier steps can arrive after
# a later step's interrupt (checkpoint ids grow with time, as LangGraph's own savers
# order them). A fork starts later than the interrupts it leaves behind.
_HELD_BY_WRITES = (
    f"SELECT FROM {WRITE} WHERE thread_id = %(run)s AND checkpoint_ns = '' "
    f"AND checkpoint_id >= %(checkpoint_id)s AND idx < 0 GROUP BY checkpoint_id "
    f"HAVING bool_or(channel = '__error__') "
    f"OR (bool_or(channel = '__interrupt__') AND NOT bool_or(channel = '__resume__'))"
)


_ELSEWHERE = "status <> %(target)s::text"  # the Run's status is not the checkpoint's


def _move_status(where: str) -> str:
    """The UPDATE that sets a root checkpoint's status, where the writes do not hold it."""
    return (
        f"UPDATE {RUN} SET updated_at = STATEMENT_TIMESTAMP(), status = %(target)s::text, "
        f"finished_at = {_finished_at('target')} WHERE {where} "
        f"AND NOT EXISTS ({_HELD_BY_WRITES}) RETURNING {RUN}.status"
    )


def _finished_at(status: str, cast: str = "text") -> str:
    """A Run's finished_at for the status in parameter `status` (typed as its other uses
    in the statement type it): none while running."""
    return f"CASE WHEN %({status})s::{cast} = 'running' THEN NULL ELSE STATEMENT_TIMESTAMP() END"


def put_checkpoint(*args: Any, **kwargs: Any) -> bool | None:
    """Store one checkpoint in one statement; False if the fence refused it.
    Arguments as _checkpoint_statement's."""
    db = _db()
    if db is None:
        return None
    sql, params = _checkpoint_statement(db, *args, **kwargs)
    if not _checkpoint_stored(params, _execute(db, sql, params)):
        return False
    if _status_left_behind(params):
        _status_moved(params, _execute(db, _MOVE_SQL, params))
    return True


async def aput_checkpoint(*args: Any, **kwargs: Any) -> bool | None:
    """put_checkpoint on the event loop's own connection."""
    db = _db()
    if db is None:
        return None
    sql, params = _checkpoint_statement(db, *args, **kwargs)
    if not _checkpoint_stored(params, await native.execute(sql, params)):
        return False
    if _status_left_behind(params):
        _status_moved(params, await native.execute(_MOVE_SQL, params))
    return True


def _checkpoint_statement(
    db: Any,
    run_id: str,
    thread_bytes: bytes,
    ns: str,
    row: dict[str, Any],
    blobs: Any,
    *,
    graph: str,
    owner: str,
) -> tuple[str, dict[str, Any]]:
    top, create = ns == "", not owner and run_id not in _known
    target = Run.Status.RUNNING if row["next_nodes"] else Run.Status.SUCCEEDED
    moves = top and not owner and (create or _known.get(run_id) != target)
    params = {
        **row,
        "run": run_id,
        "ns": ns,
        "target": target,
        "moves": moves,
        "channel_versions": json.dumps(row["channel_versions"]),
        "next_nodes": json.dumps(row["next_nodes"]),
        **_row_params(_BLOB_FIELDS, list(blobs)),
        "owner": owner,
        "ttl": timedelta(seconds=settings.DURABLERUNS_LANGGRAPH_LEASE_TTL),
    }
    sql = _put_sql(top, bool(owner), create, _bucket(len(blobs)), moves)
    if create:
        # The Run's INSERT comes from Django's compiler, so it follows the model's
        # columns and defaults; its placeholders are spliced in positionally.
        status = Run.Status.RUNNING if row["next_nodes"] or not top else Run.Status.SUCCEEDED
        sql = _with_insert(sql, _compiled_run_insert(db.alias))
        params.update(_run_values(db, run_id, thread_bytes, graph, status))
        params["thread_bytes"] = thread_bytes
    return sql, params


def _bucket(rows: int) -> int:
    """The row count a statement is made for: exact up to VALUES_ROWS, then arrays."""
    return rows if rows <= VALUES_ROWS else VALUES_ROWS + 1


def _checkpoint_stored(params: dict[str, Any], result: list[tuple[Any, ...]]) -> bool:
    """Whether the fence let the checkpoint in; remembers the thread and its status."""
    (stored, status), run_id = result[0], params["run"]
    if not stored:
        _known.pop(run_id, None)
        return False
    if run_id not in _known and len(_known) >= KNOWN_LIMIT:
        _known.clear()
    # No status: the statement created the Run, with the status it was given.
    _known[run_id] = status or params.get("run_status", "")
    return True


def _status_left_behind(params: dict[str, Any]) -> bool:
    """A root checkpoint stored without the status UPDATE (this process thought the
    status would not move) found another status: someone else moved it since."""
    top = params["ns"] == "" and not params["owner"]
    return top and not params["moves"] and _known.get(params["run"]) != params["target"]


# The status UPDATE of a root checkpoint whose statement left it out (rare: a thread
# moved by another process). Fenced like the checkpoint: it never reopens a thread.
_MOVE_SQL = (
    f"WITH moved AS ({_move_status(f'{_OPEN} AND {RUN}.{_ELSEWHERE}')}) "
    f"SELECT (SELECT status FROM moved)"
)


def _status_moved(params: dict[str, Any], result: list[tuple[Any, ...]]) -> None:
    # Not moved: the status is held by the checkpoint's writes, or the thread closed.
    _known[params["run"]] = result[0][0] or ""


@cache
def _with_insert(sql: str, insert: str) -> str:
    return sql.replace("%(insert_run)s", insert, 1)


# The new Run's columns that differ between threads; its times are the statement's,
# and the other columns are constants.
_RUN_VARIABLE = ("id", "agent", "input", "status")
_RUN_NOW = {
    "started_at": "STATEMENT_TIMESTAMP()",
    "created_at": "STATEMENT_TIMESTAMP()",
    "updated_at": "STATEMENT_TIMESTAMP()",
    "finished_at": _finished_at("run_status", "varchar"),  # as the status column's
}


def _run_values(
    db: Any, run_id: str, thread_bytes: bytes, graph: str, status: str
) -> dict[str, Any]:
    """The new thread's Run: its values for the INSERT's named parameters (no model
    instance: building one cost a tenth of a first checkpoint)."""
    thread_id = printable(thread_bytes.decode("utf-8", "surrogatepass"))
    return {
        "run_id": run_id,
        "run_agent": graph or "langgraph",
        "run_input": _INPUT.get_db_prep_save({"thread_id": thread_id}, db),
        "run_status": status,
    }


_INPUT = Run._meta.get_field("input")
# steps_used stays 0: a thread's steps are counted from its checkpoints when shown
# (Run.fill_langgraph_activity), so that a checkpoint need not write the Run row.
_RUN_CONSTANTS: dict[str, Any] = {
    "agent_version": "",
    "max_steps": 0,
    "max_duration_seconds": 0,
    "steps_used": 0,
}


@cache
def _compiled_run_insert(alias: str) -> str:
    """Django's INSERT of a langgraph Run, compiled once (0.6 ms per call): the
    columns that vary take named parameters, the times are the statement's, the
    constants are inlined (fewer parameters, so psycopg caches the statement's
    conversion), database defaults stay DEFAULT."""
    db = connections[alias]
    sample = Run(id="", kind=Run.Kind.LANGGRAPH, agent="", input={}, **_RUN_CONSTANTS)
    fields = list(Run._meta.concrete_fields)
    query = InsertQuery(Run)
    query.insert_values(fields, [sample])
    ((sql, values),) = query.get_compiler(connection=db).as_sql()
    with_values = [f for f in fields if not hasattr(f.pre_save(sample, True), "as_sql")]
    parts = sql.split("%s")
    if not len(with_values) == len(values) == len(parts) - 1:
        raise RuntimeError("the Run INSERT's parameters do not match its fields")
    named = {f.attname for f in with_values} & {*_RUN_VARIABLE, *_RUN_NOW}
    if named != {*_RUN_VARIABLE, *_RUN_NOW}:
        raise RuntimeError("a Run column the LangGraph saver sets is missing")

    def slot(field: Any, value: Any) -> str:
        if field.attname in _RUN_VARIABLE:
            return f"%(run_{field.attname})s"
        if field.attname in _RUN_NOW:
            return _RUN_NOW[field.attname]
        return psycopg.sql.Literal(value).as_string(None)

    slots = [slot(f, v) for f, v in zip(with_values, values, strict=True)]
    return "".join(p + slots[i] for i, p in enumerate(parts[:-1])) + parts[-1]


# --- put_writes --------------------------------------------------------------------


@cache
def _writes_sql(fenced: bool, leased: bool, status: bool, rows: int) -> str:
    # Special writes (error, interrupt, resume: negative idx) replace what the task
    # wrote before; a regular write re-sent keeps the first.
    source = "moved.id" if fenced else "%(run)s"
    insert = (
        f"INSERT INTO {WRITE} (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
        f"idx, channel, type, blob, created_at) "
        f"SELECT {source}, %(ns)s, %(checkpoint_id)s, w.task_id, w.task_path, w.idx, w.channel, "
        f"w.type, w.blob, STATEMENT_TIMESTAMP() "
        f"FROM {'moved, ' if fenced else ''}{_rows(_WRITE_FIELDS, rows)} "
        f"AS w(task_id, task_path, idx, channel, type, blob) "
        f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
        f"channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob, "
        f"task_path = EXCLUDED.task_path WHERE EXCLUDED.idx < 0"
    )
    if not fenced:
        return insert + " RETURNING 1"
    set_status = ""
    if status:
        set_status = f", status = %(status)s::text, finished_at = {_finished_at('status')}"
    return (
        f"WITH moved AS (UPDATE {RUN} SET updated_at = STATEMENT_TIMESTAMP()"
        f"{set_status}{_EXTEND if leased else ''} "
        f"WHERE {_OPEN}{_LEASED if leased else ''} RETURNING {RUN}.id), "
        f"written AS ({insert}) SELECT count(*) FROM moved"
    )


# A task's writes and a checkpoint's new blobs, a few rows, go in as VALUES rows:
# the same INSERT from unnest() of six arrays took 0.2 ms more (array parameters
# parsed and unnested per call). Many rows go in as arrays (one statement per count).
VALUES_ROWS = 8
_WRITE_FIELDS = (
    ("task_id", "text"),
    ("task_path", "text"),
    ("idx", "integer"),
    ("channel", "text"),
    ("type", "text"),
    ("blob", "bytea"),
)
_BLOB_FIELDS = (
    ("blob_channel", "text"),
    ("blob_version", "text"),
    ("blob_type", "text"),
    ("blob_data", "bytea"),
)


def _rows(fields: tuple[tuple[str, str], ...], rows: int) -> str:
    """The rows' source: VALUES with a parameter per value, or unnest() of arrays."""
    if not 0 < rows <= VALUES_ROWS:
        return "unnest(" + ", ".join(f"%({f}s)s::{t}[]" for f, t in fields) + ")"
    values = ("(" + ", ".join(f"%({f}_{i})s::{t}" for f, t in fields) + ")" for i in range(rows))
    return "(VALUES " + ", ".join(values) + ")"


def _row_params(fields: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """_rows's parameters for rows of values in the order of `fields`."""
    if not 0 < len(rows) <= VALUES_ROWS:
        return {f"{f}s": [r[j] for r in rows] for j, (f, _) in enumerate(fields)}
    return {f"{f}_{i}": r[j] for i, r in enumerate(rows) for j, (f, _) in enumerate(fields)}


def put_writes(*args: Any, **kwargs: Any) -> bool | None:
    """Store a task's writes in one statement. Fenced (a status to set, or a worker's
    lease to check), False if the fence refused them. Arguments as _writes_statement's."""
    db = _db()
    if db is None:
        return None
    sql, params = _writes_statement(*args, **kwargs)
    return _writes_stored(_execute(db, sql, params), params)


async def aput_writes(*args: Any, **kwargs: Any) -> bool | None:
    """put_writes on the event loop's own connection."""
    if _db() is None:
        return None
    sql, params = _writes_statement(*args, **kwargs)
    return _writes_stored(await native.execute(sql, params), params)


def _writes_statement(
    run_id: str,
    ns: str,
    checkpoint_id: str,
    rows: Any,
    *,
    status: str | None,
    owner: str,
    fenced: bool,
) -> tuple[str, dict[str, Any]]:
    params = {
        "run": run_id,
        "ns": ns,
        "checkpoint_id": checkpoint_id,
        "status": status,
        "owner": owner,
        "ttl": timedelta(seconds=settings.DURABLERUNS_LANGGRAPH_LEASE_TTL),
        "fenced": fenced,
    }
    params.update(_row_params(_WRITE_FIELDS, [tuple(r[f] for f, _ in _WRITE_FIELDS) for r in rows]))
    return _writes_sql(fenced, bool(owner), status is not None, _bucket(len(rows))), params


def _writes_stored(result: list[tuple[Any, ...]], params: dict[str, Any]) -> bool:
    if not params["fenced"]:
        return True
    stored = bool(result[0][0])
    if stored and params["status"] and params["run"] in _known:
        _known[params["run"]] = params["status"]  # the next checkpoint knows it moved
    return stored


# --- reads ---------------------------------------------------------------------------


@cache
def _fetch_sql(thread: bool, ns: bool, checkpoint_id: bool, before: bool) -> str:
    where = [
        condition
        for wanted, condition in (
            (thread, "thread_id = %(run)s"),
            (ns, "checkpoint_ns = %(ns)s"),
            (checkpoint_id, "checkpoint_id = %(checkpoint_id)s"),
            (before, "checkpoint_id < %(before)s"),
        )
        if wanted
    ]
    order = "ORDER BY c.checkpoint_id DESC, c.thread_id, c.checkpoint_ns"
    ordered = "w.task_path, w.task_id, w.idx"
    return (
        f"SELECT t.thread_id_bytes, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, "
        f"c.type, c.checkpoint, c.metadata_type, c.metadata, b.channels, b.types, b.blobs, "
        f"w.task_ids, w.channels, w.types, w.blobs "
        f"FROM (SELECT * FROM {CHECKPOINT} {'WHERE ' if where else ''}{' AND '.join(where)} "
        f"{order.replace('c.', '')} LIMIT %(limit)s::bigint) c "
        f"JOIN {THREAD} t ON t.run_id = c.thread_id "
        f"LEFT JOIN LATERAL (SELECT array_agg(b.channel) AS channels, array_agg(b.type) AS types, "
        f"array_agg(b.blob) AS blobs FROM {BLOB} b "
        f"JOIN jsonb_each_text(c.channel_versions) v ON b.channel = v.key AND b.version = v.value "
        f"WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns "
        f"AND b.type <> 'empty') b ON true "
        f"LEFT JOIN LATERAL (SELECT array_agg(w.task_id ORDER BY {ordered}) AS task_ids, "
        f"array_agg(w.channel ORDER BY {ordered}) AS channels, "
        f"array_agg(w.type ORDER BY {ordered}) AS types, "
        f"array_agg(w.blob ORDER BY {ordered}) AS blobs FROM {WRITE} w "
        f"WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
        f"AND w.checkpoint_id = c.checkpoint_id) w ON true {order}"
    )


def fetch(*args: Any) -> list[tuple[Any, ...]] | None:
    """Checkpoints newest first, each with its channel values and pending writes,
    in one query: (thread id bytes, ns, id, parent id, type, checkpoint, metadata
    type, metadata, [(channel, type, blob)], [(task id, channel, type, blob)]).
    Arguments as _fetch_statement's."""
    db = _db()
    if db is None:
        return None
    return _records(_execute(db, *_fetch_statement(*args)))


async def afetch(*args: Any) -> list[tuple[Any, ...]] | None:
    """fetch on the event loop's own connection."""
    if _db() is None:
        return None
    return _records(await native.execute(*_fetch_statement(*args)))


def _fetch_statement(
    run_id: str | None,
    ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
    limit: int | None,
) -> tuple[str, dict[str, Any]]:
    sql = _fetch_sql(run_id is not None, ns is not None, bool(checkpoint_id), bool(before))
    params = {
        "run": run_id,
        "ns": ns,
        "checkpoint_id": checkpoint_id,
        "before": before,
        "limit": limit,
    }
    return sql, params


def _records(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [
        (
            *row[:8],
            list(zip(row[8] or [], row[9] or [], row[10] or [], strict=True)),
            list(zip(row[11] or [], row[12] or [], row[13] or [], row[14] or [], strict=True)),
        )
        for row in rows
    ]
