"""Operator actions on a run. Each is a conditional update, so repeating it is harmless,
and each is audited in the same transaction as the change."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from .. import audit
from ..models import Run
from . import doorbell

Status = Run.Status
RESUMABLE = (Status.FAILED, Status.CANCELLED, Status.WAITING)


def cancel(run: Run, *, user: Any) -> bool:
    """Stop a run that has not finished. Bumping the fence makes a worker that is
    executing it now fail its next write, so it stops before its next effect."""
    with transaction.atomic():
        changed = (
            Run.objects.filter(pk=run.pk)
            .exclude(status__in=Run.TERMINAL)
            .update(
                status=Status.CANCELLED,
                fence=F("fence") + 1,
                lease_owner="",
                lease_expires_at=None,
                wake_at=None,
                finished_at=Now(),
                updated_at=Now(),
            )
        )
        if changed:
            audit.record(
                user,
                "run.cancel",
                run,
                before={"status": run.status},
                after={"status": Status.CANCELLED},
            )
    return bool(changed)


def resume(run: Run, *, user: Any) -> bool:
    """Continue a failed, cancelled or waiting run from its last checkpoint (same keys)."""
    with transaction.atomic():
        changed = Run.objects.filter(pk=run.pk, status__in=RESUMABLE).update(
            status=Status.QUEUED,
            error=None,
            finished_at=None,
            wake_at=None,
            rang_at=Now(),
            updated_at=Now(),
        )
        if changed:
            audit.record(
                user,
                "run.resume",
                run,
                before={"status": run.status},
                after={"status": Status.QUEUED},
            )
            doorbell.ring(run.pk)
    return bool(changed)
