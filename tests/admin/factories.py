"""Runs in every state a retention policy must tell apart, created directly."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from durableruns.models import Effect, Run, Step

OLD = timedelta(days=40)


def make_run(
    run_id: str,
    status: str,
    *,
    agent: str = "refund-bot",
    age: timedelta = OLD,
    legal_hold: bool = False,
    effect_state: str = Effect.State.SUCCEEDED,
    **fields: Any,
) -> Run:
    finished = timezone.now() - age
    run = Run.objects.create(
        id=run_id,
        agent=agent,
        agent_version="1",
        input={"order_id": "A-1", "note": "hello"},
        status=status,
        result={"refunded": True} if status == Run.Status.SUCCEEDED else None,
        max_steps=10,
        max_duration_seconds=60,
        legal_hold=legal_hold,
        finished_at=finished if status in Run.TERMINAL else None,
        **fields,
    )
    Run.objects.filter(pk=run.pk).update(created_at=finished - timedelta(minutes=1))
    Step.objects.create(
        run=run,
        position=0,
        step_id="0-plan",
        kind="llm",
        name="plan",
        input={"messages": ["refund A-1"]},
        result={"content": "a plan"},
        started_at=finished,
        finished_at=finished,
    )
    Effect.objects.create(
        run=run,
        position=1,
        idempotency_key=f"{run_id}:1-refund:refund:ab",
        tool="refund",
        tool_kind="idempotent_write",
        fingerprint="ab",
        args={"order_id": "A-1", "cents": 500},
        state=effect_state,
        result={"refund_id": "r-1"},
        started_at=finished,
    )
    return run


def mixed_runs() -> dict[str, Run]:
    """One run of each kind a policy must treat differently, all 40 days old."""
    status = Run.Status
    return {
        "succeeded": make_run("succeeded", status.SUCCEEDED),
        "failed": make_run("failed", status.FAILED),
        "cancelled": make_run("cancelled", status.CANCELLED),
        "recent": make_run("recent", status.SUCCEEDED, age=timedelta(days=1)),
        "other-agent": make_run("other-agent", status.SUCCEEDED, agent="research-bot"),
        "running": make_run("running", status.RUNNING),
        "waiting": make_run("waiting", status.WAITING),
        "awaiting": make_run("awaiting", status.AWAITING_APPROVAL),
        "escalated": make_run("escalated", status.ESCALATED, effect_state=Effect.State.UNKNOWN),
        # Cancelled while escalated: terminal, but the effect's outcome is still unknown.
        "cancelled-unknown": make_run(
            "cancelled-unknown", status.CANCELLED, effect_state=Effect.State.UNKNOWN
        ),
        "held": make_run("held", status.SUCCEEDED, legal_hold=True),
    }
