"""Operator actions on a run: cancel, resume, fork, dry replay.

Each state change is a conditional update, so repeating it is harmless, and each is
audited in the same transaction as the change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from ..engine import doorbell, replay
from ..engine.runs import start_run
from ..models import Run
from . import audit
from .exports import history_from_export

Status = Run.Status
RESUMABLE = (Status.FAILED, Status.CANCELLED, Status.WAITING)


def start(
    agent: str,
    input: Any,
    *,
    user: Any,
    run_id: str | None = None,
    version: str | None = None,
) -> tuple[Run, bool]:
    """Start a run (idempotent on `run_id`); a new one is audited. Returns (run, created)."""
    with transaction.atomic():
        run, created = start_run(agent, input, run_id=run_id, user=user, version=version)
        if created:
            audit.record(
                user, "run.start", run, after={"agent": run.agent, "version": run.agent_version}
            )
    return run, created


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
        # A LangGraph thread is resumed by LangGraph (a reviewer's decision), never queued.
        changed = Run.objects.filter(pk=run.pk, status__in=RESUMABLE, kind=Run.Kind.NATIVE).update(
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


def fork(run: Run, position: int, *, user: Any, sandbox: bool = False) -> Run:
    """A new run reusing `run`'s steps before `position` (engine.replay.fork), audited."""
    created_by = user if getattr(user, "is_authenticated", False) else None
    with transaction.atomic():
        child = replay.fork(run, position, created_by=created_by, sandbox=sandbox)
        audit.record(
            user,
            "run.fork",
            run,
            before={"run": run.id, "status": run.status},
            after={
                "fork": child.id,
                "position": position,
                "sandbox": sandbox,
                "steps_reused": child.steps.count(),
            },
        )
    return child


def dry_replay(run_or_export: Run | Mapping[str, Any]) -> replay.ReplayReport:
    """Dry-replay a stored run or an exported document (raises ExportError if invalid)."""
    if isinstance(run_or_export, Run):
        return replay.dry_replay(run_or_export)
    return replay.dry_replay(*history_from_export(run_or_export))
