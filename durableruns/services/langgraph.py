"""Operator actions on LangGraph threads, audited."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from ..engine.gates import outcome_of
from ..models import Approval, LangGraphCheckpoint, Run
from . import audit
from .runs import said_yes


class ForkRefused(ValueError):
    pass


def fork_thread(run: Run, checkpoint_id: str, *, user: Any) -> Run:
    """A new thread holding `run`'s root checkpoints up to `checkpoint_id` (and its
    ancestors): LangGraph continues it from there, the original is untouched.

    The fork rule (services.runs.ForkApprovals): the fork never carries a decision
    that said yes. An interrupt at `checkpoint_id` is asked again (its task's writes,
    the decision among them, are not copied, so the node runs again and a reviewer
    gets a fresh approval); a checkpoint after a yes is refused, naming where to fork."""
    from ..langgraph import store

    if run.kind != Run.Kind.LANGGRAPH or run.redacted_at is not None:
        raise ForkRefused("only a LangGraph thread that is not redacted can be forked")
    if not checkpoint_id or len(checkpoint_id) > 200 or "\x00" in checkpoint_id:
        raise ForkRefused("no such checkpoint in this thread's graph")
    if not LangGraphCheckpoint.objects.filter(
        thread_id=run.pk, checkpoint_ns="", checkpoint_id=checkpoint_id
    ).exists():
        raise ForkRefused("no such checkpoint in this thread's graph")
    asked_again = _asked_again(run, checkpoint_id)
    target = f"{run.langgraph_thread.thread_id}:fork:{uuid.uuid4().hex[:12]}"
    with transaction.atomic():
        child_id = store.copy_thread(
            run.langgraph_thread.thread_id,
            target,
            up_to=checkpoint_id,
            without_tasks=[task.task_id for task in asked_again],
        )
        Run.objects.filter(pk=child_id).update(
            parent=run, agent=run.agent, created_by=user if user.is_authenticated else None
        )
        after = {
            "checkpoint_id": checkpoint_id,
            "child": child_id,
            "approvals_asked_again": sorted(task.node for task in asked_again),
        }
        audit.record(user, "run.fork", run, after=after)
    return Run.objects.get(pk=child_id)


def _asked_again(run: Run, checkpoint_id: str) -> list[Any]:
    """The interrupted tasks at `checkpoint_id`, which the fork asks again; raises
    ForkRefused if an earlier checkpoint's interrupt was answered with anything but a
    reviewer's recorded no (a yes, or an answer given outside durableruns)."""
    from ..langgraph import store

    chain = store.root_ancestry(run.pk, checkpoint_id)
    tasks = store.interrupted_tasks(run.pk, chain)
    approvals = {
        a.interrupt_id: a
        for a in Approval.objects.filter(
            run_id=run.pk, interrupt_id__in=[i for t in tasks for i in t.interrupt_ids]
        )
    }
    for task in tasks:
        if task.checkpoint_id == checkpoint_id:
            continue
        for interrupt_id in task.interrupt_ids:
            if not _recorded_no(approvals.get(interrupt_id)):
                raise ForkRefused(
                    f"checkpoint {checkpoint_id} comes after {task.node!r} was answered "
                    f"({_answer(approvals.get(interrupt_id))}): a fork from it would carry "
                    "that answer into a thread where nobody gave it. Fork from checkpoint "
                    f"{task.checkpoint_id} instead: there a reviewer is asked again."
                )
    return [task for task in tasks if task.checkpoint_id == checkpoint_id]


def _recorded_no(approval: Approval | None) -> bool:
    from ..langgraph.store import ANSWERED_OUTSIDE

    if approval is None or approval.state == Approval.State.PENDING:
        return False
    return approval.decider_name != ANSWERED_OUTSIDE and not said_yes(outcome_of(approval))


def _answer(approval: Approval | None) -> str:
    if approval is None:
        return "no approval recorded"
    if approval.state == Approval.State.PENDING:
        return "its approval is still pending"
    return f"{approval.state} by {approval.decider_name or 'the system'}"
