"""The workers' Postgres pool checks a connection before reuse only after it sat unused.

With CONN_HEALTH_CHECKS, Django's pool checks every connection it hands out (an empty
query: a round trip). A worker executing hundreds of runs takes a connection from the
pool for every stretch of a run's statements (a waiting run holds none, invariant 17),
so those checks were a third of a run's round trips and about 15 % of the worker's CPU
with 1,000 runs in flight. A connection handed out again within IDLE_CHECK_AFTER seconds
of its last handout worked a moment ago. If it broke since, its next statement fails as
a connection that breaks mid-use does, and the engine hands the run back
(StoreUnavailable) to be resumed from what Postgres holds: skipping the check changes
no outcome, only how a rare broken connection is noticed.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # settings import this module in every process, most with no pool
    import psycopg

IDLE_CHECK_AFTER = 1.0  # seconds

_handed_out: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def check_if_idle(connection: psycopg.Connection[Any]) -> None:
    """psycopg_pool's `check`: raises if a connection unused for IDLE_CHECK_AFTER seconds
    is broken (the pool then discards it and hands out another)."""
    now = time.monotonic()
    with _lock:
        last = _handed_out.get(connection)
    if last is None or now - last >= IDLE_CHECK_AFTER:
        from psycopg_pool import ConnectionPool

        ConnectionPool.check_connection(connection)
    with _lock:
        _handed_out[connection] = now
