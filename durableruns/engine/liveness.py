"""One liveness rule for every executor (invariant 13).

Whatever executes a run (a native agent, a LangGraph resume, and later parallel
branches and child runs) does it inside `executing()`, which takes the lease under
this process's liveness:

- one Postgres session per worker process, outside the connection pool, holds an
  advisory lock keyed by the process's owner id for the process's life. Every lease
  the process takes is owned by "<process owner id>/<suffix>", so the sweeper can tell
  whose it is: "running, live lease, its process's lock free" is a dead process, and
  all of its runs are taken over at once (store.take_over_dead_owners);
- one heartbeat thread per process renews every lease the process holds, in one
  UPDATE every TTL/3, and marks lost any it could not renew.

So an in-flight run costs a thread and no session of its own: a worker running
hundreds of runs holds one liveness session whatever the number. A hung process
keeps its session and lock, and the lease TTL is the fallback, as before. An executor
that took a lease outside `executing()` would have no live process lock behind it,
be taken over while alive, and have its side effects repeated.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections

from .. import metrics
from . import store

log = logging.getLogger(__name__)


@contextmanager
def executing(take_lease: Callable[[str], store.Lease | None]) -> Iterator[store.Lease | None]:
    """Hold a lease under this process's liveness while the body executes its run.

    `take_lease(owner)` takes the run's lease for `owner` (a conditional UPDATE) and
    returns it, or None when the run is not the caller's to execute now. Yields the
    lease, or None when no lease was taken (a live executor holds it, or this process
    could not hold its liveness lock): the caller then executes nothing."""
    process = current()
    if not process.ensure_locked():
        yield None
        return
    lease = take_lease(process.new_owner())
    if lease is None:
        yield None
        return
    process.hold(lease)
    try:
        yield lease
    finally:
        process.drop(lease)


def pid_of(owner: str) -> int | None:
    """The process id in a lease owner ("host:pid:id/suffix", ProcessLiveness), or None
    for an owner that names no process (a worker of an older release)."""
    process = owner.rpartition("/")[0].split(":")
    return int(process[1]) if len(process) == 3 and process[1].isdigit() else None


class ProcessLiveness:
    """This process's liveness session and its heartbeat thread (see the module)."""

    def __init__(self) -> None:
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._leases: dict[str, store.Lease] = {}
        self._mutex = threading.Lock()
        self._session: psycopg.Connection[Any] | None = None
        self._heartbeat: threading.Thread | None = None
        self._stopped = threading.Event()

    def new_owner(self) -> str:
        """A lease owner unique to one taking of a lease, naming this process."""
        return f"{self.owner}/{uuid.uuid4().hex[:8]}"

    def ensure_locked(self) -> bool:
        """Whether this process holds its liveness lock (taken now if need be), so a
        lease taken next is covered; False if the database refused (logged)."""
        with self._mutex:
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(
                    target=self._beat, daemon=True, name="lease-heartbeat"
                )
                self._heartbeat.start()
            if self._session is not None or not store.owner_detection_enabled():
                return True
            try:
                self._session = _locked_session(self.owner)
            except psycopg.Error:
                log.exception("liveness: cannot hold this process's lock; taking no lease")
                return False
            return True

    def hold(self, lease: store.Lease) -> None:
        with self._mutex:
            self._leases[lease.owner] = lease

    def drop(self, lease: store.Lease) -> None:
        with self._mutex:
            self._leases.pop(lease.owner, None)

    def held(self) -> list[store.Lease]:
        with self._mutex:
            return list(self._leases.values())

    def close(self) -> None:
        """Stop the heartbeat and end the session (its lock goes with it)."""
        self._stopped.set()
        with self._mutex:
            if self._session is not None:
                with suppress(psycopg.Error):
                    self._session.close()
                self._session = None

    def _beat(self) -> None:
        while not self._stopped.wait(self._interval()):
            try:
                self._check_session()
                leases = self.held()
                if leases:
                    store.renew_leases(leases)
                for lease in leases:
                    if lease.lost:
                        log.warning("run %s: lease lost (fence %s)", lease.run_id, lease.fence)
            except Exception:
                # Database trouble: the local deadline in Lease.ensure_held() stops
                # each executor before its next effect.
                log.exception("liveness: heartbeat failed")
                close_old_connections()
            finally:
                store.release_connection()
                metrics.flush_step_counts()  # what the last tasks' throttled flush left

    def _interval(self) -> float:
        ttls = [lease.ttl for lease in self.held()] or [settings.DURABLERUNS_LEASE_TTL]
        return min(ttls) / 3

    def _check_session(self) -> None:
        """A liveness session that broke let the lock go (the sweeper may have taken
        this process's runs over; their fence stops them): take it again."""
        with self._mutex:
            session = self._session
            if session is None:
                return
            try:
                session.execute("SELECT 1")
            except psycopg.Error:
                log.warning("liveness: the session holding this process's lock broke; retaking")
                with suppress(psycopg.Error):
                    session.close()
                self._session = None
                self._session = _locked_session(self.owner)


def _locked_session(owner: str) -> psycopg.Connection[Any]:
    """A session of its own (never the pool's: a pooled session goes back to other
    threads) holding the process's advisory lock."""
    params = connections[DEFAULT_DB_ALIAS].get_connection_params()
    session = psycopg.connect(**params, autocommit=True)
    session.execute("SELECT pg_advisory_lock(%s)", [store.process_lock_key(owner)])
    return session


_current: ProcessLiveness | None = None
_current_lock = threading.Lock()


def current() -> ProcessLiveness:
    """This process's liveness (made on first use, so in the process that executes)."""
    global _current
    with _current_lock:
        if _current is None:
            _current = ProcessLiveness()
        return _current


def close() -> None:
    """End this process's liveness (a worker shutting down, a test ending): with no
    lease held, nothing is lost; a lease still held is taken over within a sweep."""
    global _current
    with _current_lock:
        if _current is not None:
            _current.close()
            _current = None


def _forget_in_child() -> None:
    # A forked child has its own pid, and no heartbeat thread: it starts its own, on
    # a session of its own (the parent's socket is the parent's).
    global _current, _current_lock
    _current, _current_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
