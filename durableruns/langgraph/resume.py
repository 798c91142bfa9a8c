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
import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now

from durableruns.engine import doorbell
from durableruns.langgraph.interrupts import resume_value
from durableruns.models import Approval, Run

log = logging.getLogger(__name__)

# The lease owner of the resume running in this context (read by the saver: fence).
current_owner: contextvars.ContextVar[str] = contextvars.ContextVar("lg_owner", default="")
_loaded: dict[str, Any] = {}


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
    if run.status not in (Run.Status.AWAITING_APPROVAL, Run.Status.RUNNING):
        return "nothing to do"
    if Approval.objects.filter(run_id=run_id, state=Approval.State.PENDING).exists():
        return "waiting for decisions"
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    if not _take_lease(run_id, owner):
        return "skipped: another worker holds the thread"
    token = current_owner.set(owner)
    try:
        return _drive(run, owner)
    finally:
        current_owner.reset(token)
        Run.objects.filter(pk=run_id, lease_owner=owner).update(
            lease_owner="", lease_expires_at=None
        )


def _take_lease(run_id: str, owner: str) -> bool:
    ttl = timedelta(seconds=settings.DURABLERUNS_LANGGRAPH_LEASE_TTL)
    return bool(
        Run.objects.filter(pk=run_id, kind=Run.Kind.LANGGRAPH, redacted_at__isnull=True)
        .filter(status__in=(Run.Status.AWAITING_APPROVAL, Run.Status.RUNNING))
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))
        .update(
            lease_owner=owner,
            lease_expires_at=Now() + ttl,
            status=Run.Status.RUNNING,
            updated_at=Now(),
        )
    )


def _drive(run: Run, owner: str) -> str:
    from langgraph.types import Command

    graph = load_graph(run.agent)
    config = {"configurable": {"thread_id": run.langgraph_thread.thread_id}}
    state = graph.get_state(config)
    pending = [i.id for i in state.interrupts]
    if pending:
        decided = {
            a.interrupt_id: resume_value(a)
            for a in Approval.objects.filter(run_id=run.pk, interrupt_id__in=pending).exclude(
                state=Approval.State.PENDING
            )
        }
        if set(decided) != set(pending):
            _settle_status(run.pk, owner, graph, config)
            return "waiting: an interrupt has no decided approval"
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
