"""The periodic sweep (invariant 7): system actions the clock triggers."""

from __future__ import annotations

from ..engine import runs
from . import approvals


def sweep(batch: int = 500) -> int:
    """Expire overdue approvals, then ring every run that needs it; returns how many.
    Decisions (and expiries) wake their runs themselves."""
    return approvals.expire_due() + runs.ring_due(batch)
