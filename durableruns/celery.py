"""The Celery app. Workers: `celery -A durableruns worker`; beat: `celery -A durableruns beat`."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")
# Celery's Django fix-up runs Django's system checks in every worker it starts: they import
# every URL, view and API schema module, half a worker's start-up CPU (0.45 of 1.0 s).
# They already run once per deployment, in `manage.py migrate`, before any worker starts.
# CELERY_SKIP_CHECKS= (empty) in the environment runs them again.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

app = Celery("durableruns")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Workers and beat import durableruns.tasks, which also starts the sweeper in each worker;
# this module never imports it (the import contract keeps that arrow one way).
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
