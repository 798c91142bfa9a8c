"""Thin Celery tasks taking ids; the logic lives in durableruns.engine."""

from __future__ import annotations

from . import idempotency
from .celery import app
from .engine import executor, runs


@app.task(name="durableruns.advance_run", ignore_result=True)
def advance_run(run_id: str) -> str:
    return executor.advance(run_id)


@app.task(name="durableruns.sweep", ignore_result=True)
def sweep() -> int:
    return runs.sweep()


@app.task(name="durableruns.prune_idempotency_records", ignore_result=True)
def prune_idempotency_records() -> int:
    return idempotency.prune_idempotency_records()


@app.task(name="durableruns.apply_retention", ignore_result=True)
def apply_retention() -> int:
    from . import retention

    return sum(sweep.runs_affected for sweep in retention.apply_all(triggered_by="beat"))
