"""The Celery app. Workers: `celery -A durableruns worker`; beat: `celery -A durableruns beat`."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")

app = Celery("durableruns")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["durableruns"])


@app.on_after_finalize.connect
def _schedule_sweeps(sender: Celery, **kwargs: object) -> None:
    from django.conf import settings

    if settings.DURABLERUNS_SWEEPER_IN_WORKERS:
        return  # every worker runs a sweeper thread; one leads (services/sweeper.py)
    sender.add_periodic_task(
        settings.DURABLERUNS_SWEEP_INTERVAL, sender.signature("durableruns.sweep"), name="sweep"
    )
    # One indexed DELETE per interval: cheap enough to run often, rare enough to ignore.
    sender.add_periodic_task(
        settings.DURABLERUNS_IDEMPOTENCY_PRUNE_INTERVAL,
        sender.signature("durableruns.prune_idempotency_records"),
        name="prune-idempotency-records",
    )
    sender.add_periodic_task(
        settings.DURABLERUNS_RETENTION_INTERVAL,
        sender.signature("durableruns.apply_retention"),
        name="apply_retention",
    )


# The sweeper thread starts in the process that executes tasks: each prefork child
# (never the parent, which forks them: a thread holding a connection must not be
# forked), or the worker itself with the solo and thread pools.
@worker_process_init.connect
def _sweep_in_pool_process(**kwargs: object) -> None:
    from .tasks import start_sweeper

    start_sweeper()


@worker_ready.connect
def _sweep_in_worker(sender: object = None, **kwargs: object) -> None:
    from celery.concurrency.prefork import TaskPool

    if not isinstance(getattr(sender, "pool", None), TaskPool):
        from .tasks import start_sweeper

        start_sweeper()


@worker_shutdown.connect
def _stop_sweeper(**kwargs: object) -> None:
    from .services.sweeper import stop_leader

    stop_leader()
