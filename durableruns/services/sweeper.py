"""The periodic sweep (invariant 7): system actions the clock triggers.

Every worker runs a `SweepLeader` thread; one at a time leads, chosen through
Postgres: the leader holds a session advisory lock (LEADER_LOCK) on its thread's
connection. A leader that dies or loses its connection frees the lock, and another
worker's thread takes it within one tick (at most half a sweep interval), so
sweeping survives the loss of any one process and no beat is needed. The leader:

- every DURABLERUNS_OWNER_CHECK_INTERVAL: expires the leases of runs whose executor
  died (engine.store.take_over_dead_owners), so recovery takes about a second, and
  then rings again every run waiting for a worker (the dead one may have taken its
  doorbell);
- every DURABLERUNS_SWEEP_INTERVAL: sweep(), recorded in SweeperBeat for /healthz
  and /metrics;
- at their own intervals: the extra jobs it was given (retention, key pruning).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from ..engine import children, runs, store
from ..models import SweeperBeat
from . import approvals
from . import runs as run_actions

log = logging.getLogger(__name__)

# (classid, objid) of the leader's advisory lock; runs use the single-bigint key space,
# so the two can never collide.
LEADER_LOCK = (0x4452, 1)
_HOLD_OR_TAKE = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
    "AND pid = pg_backend_pid() AND granted AND classid = %s AND objid = %s AND objsubid = 2) "
    "THEN true ELSE pg_try_advisory_lock(%s, %s) END"
)
# A leader that is frozen, not dead (SIGSTOP, a hung call, a paused VM), keeps its
# session and so the lock, and nothing would sweep again. Once the sweep is stale, a
# follower ends the holder's session: that frees the lock for the next tick, and the
# frozen leader, if it ever wakes, finds its connection gone and must win it back.
_DEPOSE = (
    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
    "AND granted AND classid = %s AND objid = %s AND objsubid = 2 AND pid <> pg_backend_pid()"
)


def sweep(batch: int = 500, swept_by: str = "") -> int:
    """Expire overdue approvals, wake parents whose children finished unnoticed (a
    crash between a child's end and its parent's wake), cancel children whose parent
    ended without them, then ring every run that needs it; returns how many.
    Decisions (and expiries) wake their runs themselves."""
    rung = approvals.expire_due() + children.wake_stranded(batch)
    run_actions.cancel_orphans(batch)
    rung += runs.ring_due(batch)
    SweeperBeat.objects.update_or_create(
        id=1,
        defaults={"swept_at": timezone.now(), "swept_by": swept_by[:200], "runs_rung": rung},
    )
    return rung


def last_sweep_age() -> float | None:
    """Seconds since the last recorded sweep, or None if none was ever recorded."""
    swept_at = SweeperBeat.objects.filter(id=1).values_list("swept_at", flat=True).first()
    return None if swept_at is None else (timezone.now() - swept_at).total_seconds()


def sweeper_stale(age: float | None) -> bool:
    limit = settings.DURABLERUNS_SWEEP_STALE_AFTER * settings.DURABLERUNS_SWEEP_INTERVAL
    return age is None or age > limit


class SweepLeader(threading.Thread):
    """One per worker process; only the thread holding LEADER_LOCK does any work."""

    def __init__(self, jobs: list[tuple[float, Callable[[], object]]] | None = None) -> None:
        super().__init__(daemon=True, name="sweep-leader")
        self.name_for_log = f"{socket.gethostname()}:{os.getpid()}"
        self.jobs = [[interval, 0.0, job] for interval, job in (jobs or [])]
        self.stopping = threading.Event()
        self.leading = False
        self._next_sweep = 0.0
        self._lock_file: BinaryIO | None = None

    def run(self) -> None:
        interval = settings.DURABLERUNS_SWEEP_INTERVAL
        tick = min(settings.DURABLERUNS_OWNER_CHECK_INTERVAL, interval / 2)
        try:
            while not self.stopping.is_set():
                try:
                    self._tick()
                except Exception:
                    log.exception("sweeper: tick failed; reconnecting")
                    self._lost()
                self.stopping.wait(tick)
        finally:
            connection.close()  # frees the leader lock at once

    def stop(self) -> None:
        self.stopping.set()

    def _tick(self) -> None:
        if not self._lead():
            return
        taken_over = store.take_over_dead_owners()
        if taken_over:
            # The dead process may also have taken doorbells it had not acted on yet
            # (kombu keeps no copy of a killed consumer's, settings): ring every run
            # still waiting for a worker now, not after DURABLERUNS_REDELIVER_AFTER. A
            # run whose doorbell is still queued gets two; the second finds it taken.
            runs.ring_due(redeliver_after=0, excluding=taken_over, oldest_first=True)
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + settings.DURABLERUNS_SWEEP_INTERVAL
            sweep(swept_by=self.name_for_log)
        for entry in self.jobs:
            interval, due, job = entry
            if now >= due:
                entry[1] = now + interval
                job()

    def _lead(self) -> bool:
        if connection.vendor != "postgresql":
            was, self.leading = self.leading, self._hold_file_lock()
        else:
            with connection.cursor() as cursor:
                cursor.execute(_HOLD_OR_TAKE, [*LEADER_LOCK, *LEADER_LOCK])
                was, self.leading = self.leading, bool(cursor.fetchone()[0])
                if not self.leading:
                    self._depose_a_frozen_leader(cursor)
        if self.leading and not was:
            log.info("sweeper: %s leads the sweep", self.name_for_log)
            self._next_sweep = 0.0
            for entry in self.jobs:
                entry[1] = 0.0
        return self.leading

    def _depose_a_frozen_leader(self, cursor: Any) -> None:
        # Twice what /healthz calls stale: a slow sweep is not a frozen leader. None:
        # no leader has swept yet, so there is nobody to depose.
        age = last_sweep_age()
        limit = settings.DURABLERUNS_SWEEP_STALE_AFTER * settings.DURABLERUNS_SWEEP_INTERVAL
        if age is not None and age > 2 * limit:
            cursor.execute(_DEPOSE, list(LEADER_LOCK))
            if cursor.fetchall():
                log.warning(
                    "sweeper: the last sweep is %.0f s old; ended the leader's session", age
                )

    def _hold_file_lock(self) -> bool:
        """The embedded setup (SQLite, one host): a file lock plays the advisory lock,
        freed by the kernel when its process dies."""
        if self._lock_file is None:
            path = Path(settings.VAR_DIR, "sweep-leader.lock")
            self._lock_file = open(path, "a+b")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _lost(self) -> None:
        self.leading = False
        connection.close()
        close_old_connections()


_leader: SweepLeader | None = None


def start_leader(jobs: list[tuple[float, Callable[[], object]]] | None = None) -> SweepLeader:
    """Start this process's sweeper thread (once)."""
    global _leader
    if _leader is None or not _leader.is_alive():
        _leader = SweepLeader(jobs)
        _leader.start()
    return _leader


def stop_leader() -> None:
    if _leader is not None:
        _leader.stop()
        _leader.join(timeout=5)
