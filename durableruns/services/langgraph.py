"""Operator actions on LangGraph threads, audited."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from ..models import LangGraphCheckpoint, Run
from . import audit


class ForkRefused(ValueError):
    pass


def fork_thread(run: Run, checkpoint_id: str, *, user: Any) -> Run:
    """A new thread holding `run`'s root checkpoints up to `checkpoint_id` (and its
    ancestors): LangGraph continues it from there, the original is untouched."""
    from ..langgraph import store

    if run.kind != Run.Kind.LANGGRAPH or run.redacted_at is not None:
        raise ForkRefused("only a LangGraph thread that is not redacted can be forked")
    if not checkpoint_id or len(checkpoint_id) > 200 or "\x00" in checkpoint_id:
        raise ForkRefused("no such checkpoint in this thread's graph")
    if not LangGraphCheckpoint.objects.filter(
        thread_id=run.pk, checkpoint_ns="", checkpoint_id=checkpoint_id
    ).exists():
        raise ForkRefused("no such checkpoint in this thread's graph")
    target = f"{run.langgraph_thread.thread_id}:fork:{uuid.uuid4().hex[:12]}"
    with transaction.atomic():
        child_id = store.copy_thread(run.langgraph_thread.thread_id, target, up_to=checkpoint_id)
        Run.objects.filter(pk=child_id).update(
            parent=run, agent=run.agent, created_by=user if user.is_authenticated else None
        )
        audit.record(
            user, "run.fork", run, after={"checkpoint_id": checkpoint_id, "child": child_id}
        )
    return Run.objects.get(pk=child_id)
