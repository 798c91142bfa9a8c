"""Hand-back: a run this worker cannot load waits for one that can.

During a rolling deploy (a run started by version 2, picked up by a worker that has
only version 1), or on a worker missing an agent module or a LangGraph graph, the run
is neither failed nor left "running": it is released to `waiting`, its reason in
`last_error` (shown on the run page), and woken again after
DURABLERUNS_HANDBACK_DELAY seconds, by the doorbell's countdown or else the sweeper,
until a worker that knows it takes it. An operator may resume it sooner, or cancel it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ..models import Run
from . import doorbell, store

log = logging.getLogger(__name__)

CODE = "waiting_for_worker"


def hand_back(lease: store.Lease, reason: str) -> str:
    """Release the run to `waiting` for a worker that can load it; returns what happened."""
    wake_at = timezone.now() + timedelta(seconds=settings.DURABLERUNS_HANDBACK_DELAY)
    log.warning("run %s: %s; handed back until %s", lease.run_id, reason, wake_at.isoformat())
    error = {"type": "HandedBack", "code": CODE, "message": reason}
    if not store.release(lease, Run.Status.WAITING, wake_at=wake_at, last_error=error):
        return "lease-lost"
    doorbell.ring_at(lease.run_id, wake_at)
    return "handed-back"


def waiting_reason(run: Run) -> str:
    """Why `run` waits for another worker, or "" if it does not."""
    error = run.last_error or {}
    if run.status != Run.Status.WAITING or error.get("code") != CODE:
        return ""
    return str(error.get("message", ""))
