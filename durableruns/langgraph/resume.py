"""Resuming an interrupted thread after its approvals are decided, from a worker.

A decision schedules `durableruns.resume_langgraph` (after commit). The task takes
the thread's lease (Run.lease_owner/lease_expires_at, extended by every checkpoint
the graph writes), then either resumes the pending interrupts with the reviewers'
decisions (`Command(resume={interrupt_id: decision})`) or, if a worker died
mid-resume, continues the graph from its last checkpoint. While a worker holds the
lease, only its writes are accepted (the fence). An expired lease is rung by the
sweeper like a native run's, and the doorbell task routes it here.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.db.models.functions import Now

from durableruns.engine import crashpoints, doorbell, handback, liveness
from durableruns.engine import store as engine_store
from durableruns.langgraph.interrupts import resume_value
from durableruns.models import Approval, Run

log = logging.getLogger(__name__)

# The lease owner of the resume running in this context (read by the saver: fence).
current_owner: contextvars.ContextVar[str] = contextvars.ContextVar("lg_owner", default="")
_loaded: dict[str, Any] = {}


# A handed-back thread (engine/handback.py) waits; its wake-up brings it here again.
RESUMABLE = (Run.Status.AWAITING_APPROVAL, Run.Status.RUNNING, Run.Status.WAITING)


class UnknownGraph(LookupError):
    pass


def load_graph(name: str) -> Any:
    """The compiled graph registered under `name` in DURABLERUNS_LANGGRAPH_GRAPHS."""
    entries = dict(item.split("=", 1) for item in settings.DURABLERUNS_LANGGRAPH_GRAPHS)
    if name not in entries:
        raise UnknownGraph(f"no graph {name!r} in DURABLERUNS_LANGGRAPH_GRAPHS")
    if entries[name] in _loaded:
        return _loaded[entries[name]]
    module, _, attribute = entries[name].partition(":")
    graph = getattr(importlib.import_module(module), attribute)
    if not hasattr(graph, "invoke"):
        graph = graph()
    _loaded[entries[name]] = graph
    return graph


def schedule(run_id: str) -> None:
    """Ask a worker to resume the thread, once the current transaction commits: the
    doorbell's advance_run hands a LangGraph thread to resume_thread."""
    doorbell.ring(run_id)


def resume_thread(run_id: str) -> str:
    """Resume or continue the thread; returns what happened (for logs)."""
    run = Run.objects.select_related("langgraph_thread").filter(pk=run_id).first()
    if run is None or run.kind != Run.Kind.LANGGRAPH:
        return "not a langgraph thread"
    if run.redacted_at is not None:
        return "redacted: a redacted thread refuses to resume"
    if run.status not in RESUMABLE:
        return "nothing to do"
    if Approval.objects.filter(run_id=run_id, state=Approval.State.PENDING).exists():
        return "waiting for decisions"
    # The liveness every executor holds (engine/liveness.py): outside it the sweeper
    # would read this live worker as dead and hand the thread to another.
    with liveness.executing(lambda owner: _take_lease(run_id, owner)) as lease:
        if lease is None:
            return "skipped: another worker holds the thread"
        owner = lease.owner
        token = current_owner.set(owner)
        # No lease is a thread its caller runs in its own process, which nothing rings;
        # a resume that failed (its database went away) leaves its lease expired
        # instead, so the sweeper rings the thread again.
        expiry: Now | None = Now()
        try:
            what = _drive(run, lease)
            _after_finished(run_id)
            expiry = None
            return what
        finally:
            current_owner.reset(token)
            Run.objects.filter(pk=run_id, lease_owner=owner).update(
                lease_owner="", lease_expires_at=expiry
            )


def _after_finished(run_id: str) -> None:
    """crashtest's AFTER_RUN_FINISHED point, once the thread's status is final."""
    if (
        settings.DURABLERUNS_CRASH_DIR
        and Run.objects.filter(pk=run_id, status__in=Run.TERMINAL).exists()
    ):
        crashpoints.crash_point(crashpoints.AFTER_RUN_FINISHED, run_id)


def _take_lease(run_id: str, owner: str) -> engine_store.Lease | None:
    ttl = settings.DURABLERUNS_LANGGRAPH_LEASE_TTL
    taken = (
        Run.objects.filter(pk=run_id, kind=Run.Kind.LANGGRAPH, redacted_at__isnull=True)
        .filter(status__in=RESUMABLE)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=Now()))
        .update(
            lease_owner=owner,
            lease_expires_at=Now() + timedelta(seconds=ttl),
            fence=F("fence") + 1,
            status=Run.Status.RUNNING,
            wake_at=None,
            updated_at=Now(),
        )
    )
    return engine_store.leased(run_id, owner, ttl) if taken else None


def _drive(run: Run, lease: engine_store.Lease) -> str:
    from langgraph.types import Command

    owner = lease.owner
    try:
        graph = load_graph(run.agent)
    except (UnknownGraph, ImportError, AttributeError) as exc:
        # Not this worker's graph (a rolling deploy, a missing module): wait for one
        # that has it, visibly, instead of staying "running" with no lease.
        reason = f"waiting for a worker that has LangGraph graph {run.agent!r} (here: {exc})"
        return handback.hand_back(lease, reason)
    config = {"configurable": {"thread_id": run.langgraph_thread.thread_id}}
    # Every saver call runs on the saver's own thread and session (saver.on_db_thread):
    # a session this thread kept while the graph runs would be one pooled session per
    # resume in flight, and with more resumes than the pool has, the saver's thread would
    # wait for a session held by the resumes waiting on it.
    engine_store.release_connection()
    state = graph.get_state(config)
    pending = {i.id: i.value for i in state.interrupts}
    if pending:
        decided = {
            a.interrupt_id: resume_value(a, pending[a.interrupt_id])
            for a in Approval.objects.filter(run_id=run.pk, interrupt_id__in=pending).exclude(
                state=Approval.State.PENDING
            )
        }
        if set(decided) != set(pending):
            _settle_status(run.pk, owner, graph, config)
            return "waiting: an interrupt has no decided approval"
        engine_store.release_connection()
        graph.invoke(Command(resume=decided), config)
        what = f"resumed {len(decided)} interrupt(s)"
    elif state.tasks:
        # Not `state.next`: if the dead worker's next checkpoint was never stored, this
        # one's tasks may all have writes already (next is empty) and still be unapplied.
        graph.invoke(None, config)
        what = "continued from the last checkpoint"
    else:
        what = "nothing to do"
    _settle_status(run.pk, owner, graph, config)
    return what


def _settle_status(run_id: str, owner: str, graph: Any, config: dict) -> None:
    """The status the graph's own writes imply, if nothing wrote one (e.g. no-op)."""
    state = graph.get_state(config)
    status = (
        Run.Status.AWAITING_APPROVAL
        if state.interrupts
        else (Run.Status.RUNNING if state.tasks else Run.Status.SUCCEEDED)
    )
    Run.objects.filter(pk=run_id, lease_owner=owner, status=Run.Status.RUNNING).update(
        status=status, updated_at=Now()
    )
