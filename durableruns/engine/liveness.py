"""One liveness rule for every executor (invariant 13).

Whatever executes a run (a native agent, a LangGraph resume, and later parallel
branches and child runs) does it inside `executing()`: the run's advisory lock on
this thread's connection first, then the lease, renewed by a heartbeat until the body
returns. The sweeper reads "running, live lease, lock free" as a dead owner
(store.take_over_dead_owners), so an executor that skipped the lock would be taken
over while alive, and its side effects repeated.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import close_old_connections, connection

from . import store

log = logging.getLogger(__name__)


@contextmanager
def executing(
    run_id: str, take_lease: Callable[[], store.Lease | None]
) -> Iterator[store.Lease | None]:
    """Hold run `run_id`'s liveness while the body executes it.

    `take_lease` takes the run's lease (a conditional UPDATE) and returns it, or None
    when the run is not the caller's to execute now. Yields the lease, or None when
    another executor is alive on the run or no lease was taken: the caller then
    executes nothing."""
    # The lock before the lease: a run with a live lease then has its lock held.
    lock = store.claim_owner_lock(run_id)
    if lock == store.LOCK_BUSY:
        yield None
        return
    try:
        lease = take_lease()
        if lease is None:
            yield None
            return
        if lock == store.LOCK_WITHOUT and store.owner_detection_enabled():
            lock = store.retry_owner_lock(run_id)
            if lock == store.LOCK_WITHOUT:
                log.warning("run %s: its hung previous owner still holds its lock", run_id)
        with Heartbeat(lease):
            yield lease
    finally:
        if lock == store.LOCK_HELD:
            store.release_owner_lock(run_id)


class Heartbeat:
    """Extends the lease every TTL/3 from a thread with its own connection."""

    def __init__(self, lease: store.Lease) -> None:
        self.lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="lease-heartbeat")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.lease.ttl)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.lease.ttl / 3):
                try:
                    if not store.renew_lease(self.lease):
                        log.warning(
                            "run %s: lease lost (fence %s)", self.lease.run_id, self.lease.fence
                        )
                        return
                except Exception:
                    # Database trouble: the local deadline in Lease.ensure_held()
                    # stops the executor before its next effect.
                    log.exception("run %s: heartbeat failed", self.lease.run_id)
                    close_old_connections()
        finally:
            connection.close()
