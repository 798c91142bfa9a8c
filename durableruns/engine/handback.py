"""Hand-back: a run this worker cannot load waits for one that can.

During a rolling deploy (a run started by version 2, picked up by a worker that has
only version 1), or on a worker missing an agent module or a LangGraph graph, the run
is neither failed nor left "running": it is released to `waiting`, its reason in
`last_error` (shown on the run page), and woken again after
DURABLERUNS_HANDBACK_DELAY seconds, by the doorbell's countdown or else the sweeper,
until a worker that knows it takes it. An operator may resume it sooner, or cancel it.

The wait is not the run's working time: when a worker that has the agent takes the run,
the seconds since the first of its consecutive hand-backs go to `handed_back_seconds`,
which max_duration leaves out (as it leaves out approval waits and sleeps).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from ..models import Run
from . import doorbell, store

log = logging.getLogger(__name__)

CODE = "waiting_for_worker"


def hand_back(lease: store.Lease, reason: str) -> str:
    """Release the run to `waiting` for a worker that can load it; returns what happened."""
    now = timezone.now()
    wake_at = now + timedelta(seconds=settings.DURABLERUNS_HANDBACK_DELAY)
    log.warning("run %s: %s; handed back until %s", lease.run_id, reason, wake_at.isoformat())
    # Handed back again (another worker without it took it): the wait began earlier.
    earlier = Run.objects.filter(pk=lease.run_id).values_list("last_error", flat=True).first()
    since = _since(earlier) or now
    error = {"type": "HandedBack", "code": CODE, "message": reason, "since": since.isoformat()}
    if not store.release(lease, Run.Status.WAITING, wake_at=wake_at, last_error=error):
        return "lease-lost"
    doorbell.ring_at(lease.run_id, wake_at)
    return "handed-back"


def taken_back(lease: store.Lease, record: Run) -> None:
    """A worker that has the agent took the run: the wait since it was handed back is
    recorded (not the run's time) and the reason cleared from the page."""
    since = _since(record.last_error)
    if since is None:
        return
    waited = max((timezone.now() - since).total_seconds(), 0.0)
    if store.record_handed_back(lease, waited):
        record.handed_back_seconds += waited
        record.last_error = None


def _since(error: object) -> datetime | None:
    if not isinstance(error, dict) or error.get("code") != CODE:
        return None
    try:
        return datetime.fromisoformat(str(error["since"]))
    except (KeyError, ValueError):
        return None  # handed back by a version that did not record when


def waiting_reason(run: Run) -> str:
    """Why `run` waits for another worker, or "" if it does not."""
    error = run.last_error or {}
    if run.status != Run.Status.WAITING or error.get("code") != CODE:
        return ""
    return str(error.get("message", ""))
