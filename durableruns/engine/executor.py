"""advance_run: take the lease, replay history, execute new steps, release.

Every exit path either releases the lease with the run's new status (conditional
on the fence) or, when the lease was lost, writes nothing at all.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models.functions import Now
from django.utils import timezone

from .. import logs, metrics
from ..models import Run as RunRecord
from . import (
    children,
    crashpoints,
    doorbell,
    gates,
    handback,
    liveness,
    registry,
    store,
    vault,
)
from .context import Run
from .errors import (
    LeaseLost,
    RunStopped,
    SerializationError,
    StoreUnavailable,
    Suspend,
    UnknownAgent,
)
from .outcomes import describe

log = logging.getLogger(__name__)
Status = RunRecord.Status


def advance(run_id: str) -> str:
    """Execute run `run_id` as far as it can go now. Returns what happened, for logs."""
    with logs.run_context(run_id):
        try:
            with liveness.executing(lambda owner: store.acquire_lease(run_id, owner)) as lease:
                if lease is None:
                    return "skipped"
                try:
                    return _drive(lease)
                except StoreUnavailable as exc:
                    return _hand_back(lease, exc)
        finally:
            metrics.flush_step_counts(at_most_every=1.0)


def _drive(lease: store.Lease) -> str:
    try:
        record = lease.record or RunRecord.objects.get(pk=lease.run_id)
        agent = registry.get_agent(record.agent, record.agent_version)
        handback.taken_back(lease, record)
        history = store.load_history(record.id)
        context = Run(
            record,
            lease,
            history,
            store.load_effects(record.id),
            max_steps=record.max_steps,
            max_duration=record.max_duration_seconds,
        )
        value = agent.fn(context, store.normalise(vault.reveal(record, "input")))
        context.finish_check()
        return _succeed(lease, context, value)
    except UnknownAgent as exc:
        # A rolling deploy, or a worker missing a module: wait for a worker that has it.
        wanted = f"agent {record.agent!r} version {record.agent_version!r}"
        return handback.hand_back(lease, f"waiting for a worker that has {wanted} (here: {exc})")
    except Suspend as suspend:
        return _suspend(lease, suspend, locals().get("context"))
    except StoreUnavailable:
        raise  # not the run's fault: advance() hands it back
    except LeaseLost as exc:
        log.warning("run %s: %s; stopping without writing", lease.run_id, exc)
        return "lease-lost"
    except RunStopped as exc:
        return _stop(lease, exc, locals().get("context"))
    except (OperationalError, InterfaceError) as exc:
        # A read lost its connection, timed out or deadlocked: the database's
        # trouble, not the run's (step and tool errors never get here).
        raise StoreUnavailable(f"run {lease.run_id}: database error ({exc})") from None
    except Exception as exc:
        return _fail(lease, describe(exc, with_traceback=True), locals().get("context"))


def _hand_back(lease: store.Lease, exc: StoreUnavailable) -> str:
    """A write lost its connection, so what committed is unknown here: stop, and hand
    the run back on a fresh connection so another attempt resumes from what Postgres
    holds. If the database is still unreachable the lease simply expires and the
    sweeper rings the run (invariant 7). Never recorded as the run's failure."""
    log.warning("run %s: %s; handing the run back", lease.run_id, exc)
    connection.close()
    try:
        if store.release(lease, Status.QUEUED, rang_at=Now()):
            doorbell.ring(lease.run_id)
    except StoreUnavailable:
        log.warning("run %s: database still unavailable; the sweeper will ring it", lease.run_id)
    return "store-unavailable"


def _progress(context: Run | None) -> dict[str, Any]:
    if context is None:
        return {}
    return {"steps_used": max(context.position, 0), **context.spend.fields()}


def _succeed(lease: store.Lease, context: Run, value: Any) -> str:
    try:
        # The result is sealed with the input: one token holds the run row's secrets.
        views, secrets = store.seal_fields(
            input=vault.reveal(context._record, "input"), result=value
        )
    except SerializationError as exc:
        return _fail(
            lease,
            {"type": "SerializationError", "message": f"the agent's return value: {exc}"},
            context,
        )
    released = store.release(
        lease,
        Status.SUCCEEDED,
        result=json.loads(views["result"] or "null"),
        secrets=secrets,
        finished_at=Now(),
        retry_position=None,
        retry_attempts=0,
        retry_attempt_times=None,
        last_error=None,
        **_progress(context),
    )
    crashpoints.crash_point(crashpoints.AFTER_RUN_FINISHED, lease.run_id, fence=lease.fence)
    if released:
        _wake_parent(lease, context)
    return "succeeded" if released else "lease-lost"


def _fail(lease: store.Lease, error: dict[str, Any], context: Run | None = None) -> str:
    released = store.release(
        lease,
        Status.FAILED,
        error=store.redacted(error),
        finished_at=Now(),
        **_progress(context),
    )
    # A failed run has finished too: crashtest arms this point for agents that fail.
    crashpoints.crash_point(crashpoints.AFTER_RUN_FINISHED, lease.run_id, fence=lease.fence)
    if released:
        _wake_parent(lease, context)
    return "failed" if released else "lease-lost"


def _wake_parent(lease: store.Lease, context: Run | None) -> None:
    """A child run's end is committed: wake its parent now, a doorbell and no polling.
    A crash before the wake leaves the parent to the sweeper (children.wake_stranded)."""
    try:
        if context is not None:
            record = context._record
            parent_id, position = record.parent_run_id, record.parent_position
        else:
            parent_id, position = children.parent_of(lease.run_id)
        if parent_id is None:
            return
        crashpoints.crash_point(crashpoints.AFTER_CHILD_FINISHED, parent_id, position or 0)
        children.wake_parent(parent_id)
    except (OperationalError, InterfaceError):
        log.warning("run %s: parent not woken; the sweeper will", lease.run_id, exc_info=True)


def _stop(lease: store.Lease, exc: RunStopped, context: Run | None = None) -> str:
    error = {"type": type(exc).__name__, "code": exc.code, "message": exc.message, **exc.details}
    return _fail(lease, error, context)


def _suspend(lease: store.Lease, suspend: Suspend, context: Run | None) -> str:
    fields: dict[str, Any] = {
        "retry_position": None,
        "retry_attempts": 0,
        "retry_attempt_times": None,
        **suspend.fields,
    }
    if suspend.status == Status.AWAITING_APPROVAL:
        position = fields.pop("approval_position")
        left = gates.release_awaiting(lease, position, **fields, **_progress(context))
        return left or "lease-lost"
    if suspend.status == Status.AWAITING_CHILD:
        left = children.release_awaiting(lease, **fields, **_progress(context))
        return left or "lease-lost"
    if suspend.status == Status.ESCALATED:
        fields["last_error"] = store.redacted(fields.get("last_error"))
        left = store.release_escalated(lease, **fields, **_progress(context))
        return left or "lease-lost"
    wake_in = fields.pop("wake_in", None)
    if wake_in is not None:
        fields["wake_at"] = timezone.now() + timedelta(seconds=wake_in)
    elif suspend.wake_at is not None:
        fields["wake_at"] = suspend.wake_at
    if "last_error" in fields:
        fields["last_error"] = store.redacted(fields["last_error"])
    if not store.release(lease, suspend.status, **fields, **_progress(context)):
        return "lease-lost"
    if suspend.status == Status.QUEUED:
        doorbell.ring(lease.run_id)
    elif "wake_at" in fields:
        doorbell.ring_at(lease.run_id, fields["wake_at"])
    return suspend.status


def worker_ready() -> None:
    """Import the agent modules a worker or web process serves."""
    registry.load_agent_modules(settings.DURABLERUNS_AGENT_MODULES)
