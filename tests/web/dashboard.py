"""Helpers for the operator dashboard tests: rows made directly in the database
(fast, exact timings) and a doorbell that does not need a broker."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from durableruns.engine import doorbell
from durableruns.models import Effect, Run, Step

_ids = itertools.count(1)
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.get_current_timezone())


def make_run(
    run_id: str | None = None,
    *,
    status: str = Run.Status.SUCCEEDED,
    agent: str = "refund-bot",
    version: str = "1",
    created_at: datetime | None = None,
    **fields: Any,
) -> Run:
    run = run_row(run_id, status=status, agent=agent, version=version, **fields)
    run.save(force_insert=True)
    if created_at is not None:
        Run.objects.filter(pk=run.pk).update(created_at=created_at)
        run.refresh_from_db()
    return run


def run_row(
    run_id: str | None = None,
    *,
    status: str = Run.Status.SUCCEEDED,
    agent: str = "refund-bot",
    version: str = "1",
    **fields: Any,
) -> Run:
    """A run, not saved (for bulk_create)."""
    fields.setdefault("max_steps", 20)
    fields.setdefault("max_duration_seconds", 1800.0)
    return Run(
        id=run_id or f"run-{next(_ids):05d}",
        agent=agent,
        agent_version=version,
        input={},
        status=status,
        **fields,
    )


def make_step(run: Run, position: int, **fields: Any) -> Step:
    step = step_row(run, position, **fields)
    step.save()
    return step


def step_row(
    run: Run,
    position: int,
    *,
    kind: str = Step.Kind.TOOL,
    name: str = "lookup_order",
    start_ms: float = 0,
    duration_ms: float = 10,
    **fields: Any,
) -> Step:
    """A step of `run`, not saved (for bulk_create): it started `start_ms` after the run."""
    started = (run.started_at or T0) + timedelta(milliseconds=start_ms)
    return Step(
        run=run,
        position=position,
        step_id=f"{position}-{name}",
        kind=kind,
        name=name,
        started_at=started,
        finished_at=started + timedelta(milliseconds=duration_ms),
        **fields,
    )


def make_effect(
    run: Run,
    position: int,
    *,
    tool: str = "refund",
    state: str = Effect.State.SUCCEEDED,
    key: str | None = None,
    **fields: Any,
) -> Effect:
    fields.setdefault("started_at", timezone.now())
    fields.setdefault("tool_kind", "idempotent_write")
    fields.setdefault("args", {"order_id": "A-1001", "cents": 1200})
    return Effect.objects.create(
        run=run,
        position=position,
        tool=tool,
        state=state,
        fingerprint="0" * 16,
        idempotency_key=key or f"{run.id}:{position}-{tool}:{tool}:{position:016d}",
        **fields,
    )


@pytest.fixture(name="rung")
def rung_fixture(monkeypatch) -> list[str]:
    """Doorbells rung, instead of messages to a broker nobody consumes in these tests."""
    rings: list[str] = []
    monkeypatch.setattr(doorbell, "_publish", lambda run_id, countdown: rings.append(run_id))
    return rings
