"""Thin Celery tasks taking ids, and the Celery implementation of the engine's doorbell
port; the logic lives in durableruns.engine and durableruns.services."""

from __future__ import annotations

from collections.abc import Callable

from celery.signals import worker_process_init, worker_ready, worker_shutdown
from django.conf import settings

from . import idempotency
from .celery import app
from .engine import executor, liveness
from .models import Run
from .services import retention, sweeper


class CeleryDoorbell:
    """`engine.doorbell.Doorbell` over Celery: a message that only says "look at run X"."""

    def ring(self, run_id: str, countdown: float | None) -> None:
        advance_run.apply_async((run_id,), countdown=countdown)


@app.task(name="durableruns.advance_run", ignore_result=True)
def advance_run(run_id: str) -> str:
    if run_id.startswith("lg-") and Run.objects.filter(pk=run_id, kind=Run.Kind.LANGGRAPH).exists():
        # The sweeper rang a LangGraph thread whose resuming worker died.
        return resume_langgraph(run_id)
    return executor.advance(run_id)


@app.task(name="durableruns.resume_langgraph", ignore_result=True)
def resume_langgraph(run_id: str) -> str:
    from .langgraph.resume import resume_thread

    return resume_thread(run_id)


@app.task(name="durableruns.sweep", ignore_result=True)
def sweep() -> int:
    return sweeper.sweep()


@app.task(name="durableruns.prune_idempotency_records", ignore_result=True)
def prune_idempotency_records() -> int:
    return idempotency.prune_idempotency_records()


@app.task(name="durableruns.apply_retention", ignore_result=True)
def apply_retention() -> int:
    return sum(sweep.runs_affected for sweep in retention.apply_all(triggered_by="beat"))


def periodic_jobs() -> list[tuple[float, Callable[[], object]]]:
    """What the sweep leader schedules besides the sweep: (interval, enqueue)."""
    return [
        (settings.DURABLERUNS_RETENTION_INTERVAL, apply_retention.delay),
        (settings.DURABLERUNS_IDEMPOTENCY_PRUNE_INTERVAL, prune_idempotency_records.delay),
    ]


def start_sweeper() -> None:
    """This worker process's sweeper thread (services.sweeper.SweepLeader); the leader
    also schedules retention and key pruning, so no beat is needed."""
    if settings.DURABLERUNS_SWEEPER_IN_WORKERS:
        sweeper.start_leader(periodic_jobs())


# The sweeper thread starts in the process that executes tasks: each prefork child
# (never the parent, which forks them: a thread holding a connection must not be
# forked), or the worker itself with the solo and thread pools. A worker imports this
# module (the app's autodiscovery) before it forks or reports ready.
@worker_process_init.connect
def _sweep_in_pool_process(**kwargs: object) -> None:
    start_sweeper()


@worker_ready.connect
def _sweep_in_worker(sender: object = None, **kwargs: object) -> None:
    from celery.concurrency.prefork import TaskPool

    if not isinstance(getattr(sender, "pool", None), TaskPool):
        start_sweeper()


@worker_shutdown.connect
def _stop_sweeper(**kwargs: object) -> None:
    sweeper.stop_leader()
    liveness.close()  # after the pool finished its tasks: no lease is held any more
