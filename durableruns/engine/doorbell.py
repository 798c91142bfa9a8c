"""Ringing a run's doorbell: a Celery message that only says "look at run X".

The message carries nothing that must survive: if Redis loses it, the sweeper
rings again, because what must happen next lives in the database (invariant 7).
A failed publish is therefore logged, never raised.

The engine only declares the port (`Doorbell`); the setting `DURABLERUNS_DOORBELL`
names the implementation, by default the Celery one beside the tasks
(`durableruns.tasks.CeleryDoorbell`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import cache
from typing import Protocol

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

log = logging.getLogger(__name__)

# Beyond this a delayed doorbell is left to the sweeper: a broker holds ETA
# messages in worker memory, which should stay small.
MAX_COUNTDOWN_SECONDS = 60.0


class Doorbell(Protocol):
    def ring(self, run_id: str, countdown: float | None) -> None:
        """Tell some worker to look at `run_id` (after `countdown` seconds); may raise."""


@cache
def _port(path: str) -> Doorbell:
    return import_string(path)()


def ring(run_id: str, countdown: float | None = None) -> None:
    """Publish after the surrounding transaction commits, so the worker sees the row."""
    transaction.on_commit(lambda: _publish(run_id, countdown))


def ring_at(run_id: str, when: datetime) -> None:
    delay = (when - timezone.now()).total_seconds()
    if delay <= MAX_COUNTDOWN_SECONDS:
        ring(run_id, countdown=max(delay, 0.0))


def _publish(run_id: str, countdown: float | None) -> None:
    try:
        _port(settings.DURABLERUNS_DOORBELL).ring(run_id, countdown)
    except Exception:
        log.warning(
            "run %s: doorbell not delivered; the sweeper will ring again", run_id, exc_info=True
        )
