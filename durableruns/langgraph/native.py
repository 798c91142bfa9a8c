"""The async saver's own psycopg connection on Postgres, so `aput`, `aput_writes`
and `aget_tuple` run their one statement on the event loop instead of waiting for
the saver thread (a thread hop per call, and the GIL shared with the graph).

One AsyncConnection per thread, made from Django's DATABASES settings on first
use and kept across the event loops the thread runs (`asyncio.run` per call would
otherwise connect each time), used under a lock of the running loop: LangGraph
calls aput and aput_writes concurrently and a psycopg connection runs one
statement at a time. On SQLite the saver does not come here (sql.py checks).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

from durableruns.engine.store import ONLY_WHEN_ASKED, prepared_statements_disabled


class _Slot:
    def __init__(self) -> None:
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.lock = asyncio.Lock()
        self.loop: weakref.ref[asyncio.AbstractEventLoop] | None = None


_local = threading.local()
_slots: weakref.WeakSet[_Slot] = weakref.WeakSet()  # for close_all


def _slot() -> _Slot:
    slot: _Slot | None = getattr(_local, "slot", None)
    if slot is None:
        slot = _local.slot = _Slot()
        _slots.add(slot)
    loop = asyncio.get_running_loop()
    if slot.loop is None or slot.loop() is not loop:
        # An asyncio.Lock belongs to one loop; the previous loop has finished.
        slot.lock, slot.loop = asyncio.Lock(), weakref.ref(loop)
    return slot


async def execute(sql: str, params: Any) -> list[tuple[Any, ...]]:
    """Run one statement (autocommit, prepared) on this thread's connection. Errors
    are Django's database exceptions, as on the thread's connection."""
    db = connections[DEFAULT_DB_ALIAS]
    slot = _slot()
    async with slot.lock:
        with db.wrap_database_errors:
            if slot.conn is not None and not _usable(slot.conn):
                await slot.conn.close()
            if slot.conn is None or slot.conn.closed:
                slot.conn = await _connect(db)
            try:
                cursor = await slot.conn.execute(sql, params, prepare=_prepare(db))
                return await cursor.fetchall()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                # A broken connection is dropped; the next call opens another.
                await slot.conn.close()
                raise


def _usable(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Idle: not closed, and not left mid-statement by a call cancelled on a loop
    that has since finished."""
    return not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def _connect(db: Any) -> psycopg.AsyncConnection[Any]:
    params = db.get_connection_params()
    params.pop("cursor_factory", None)
    if _prepare(db):
        # Django's parameters carry prepare_threshold=None, with which psycopg ignores
        # prepare=True: every checkpoint's statement was parsed and planned again
        # (half of `aput`). A threshold no query reaches prepares only when asked.
        params["prepare_threshold"] = ONLY_WHEN_ASKED
    # Every statement here finds rows by key. A prepared statement keeps the plan made
    # at its first executions: on a new database (tables empty, never analyzed) that
    # was a sequential scan of the Run table, kept while the table grew (15 million
    # rows read in one benchmark run). Without seqscans, key lookups stay index scans.
    params["options"] = f"{params.get('options', '')} -c enable_seqscan=off".strip()
    return await psycopg.AsyncConnection.connect(**params, autocommit=True)


def _prepare(db: Any) -> bool | None:
    """Prepared, as the engine's hot path, unless the database OPTIONS disable it."""
    return None if prepared_statements_disabled(db) else True


def close_all() -> None:
    """Close every thread's connection (tests, before dropping a database). Called
    with no loop running: psycopg connections are not tied to the loop that made them."""
    for slot in list(_slots):
        if slot.conn is not None and not slot.conn.closed:
            asyncio.run(slot.conn.close())
        slot.conn = None
