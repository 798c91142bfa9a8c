"""The one place that turns engine intents into SQL.

Hot-path writes are single statements conditional on the lease fence, so a step
checkpoint costs one round trip and one commit (in autocommit mode). On Postgres
the fence check reads the run row FOR SHARE, which conflicts with the UPDATE that
takes over a lease: either the takeover waits for this commit (and then sees the
step), or this write sees the new fence and inserts nothing. The unique
(run, position) constraint is the last line of defence.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.db.models import DateTimeField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from ..models import CHECKPOINT_SCHEMA_VERSION, Effect, Run, Step
from . import crashpoints
from .errors import LeaseLost, SerializationError, StoreUnavailable
from .keys import canonical_json, too_deep
from .redaction import redact

log = logging.getLogger(__name__)


@dataclass
class Lease:
    run_id: str
    owner: str
    fence: int
    ttl: float
    valid_until: float = field(default=0.0)  # time.monotonic() deadline, a local safety margin
    lost: bool = False

    def ensure_held(self) -> None:
        """Stop before the next effect if the lease is gone or may have expired."""
        if self.lost or time.monotonic() >= self.valid_until:
            self.lost = True
            raise LeaseLost(f"lease on run {self.run_id} lost (fence {self.fence})")

    def extended(self) -> None:
        # Keep a margin: database time decides, this clock only errs on the safe side.
        self.valid_until = time.monotonic() + self.ttl * 0.8


def _in(seconds: float) -> ExpressionWrapper:
    delta = Value(timedelta(seconds=seconds))
    return ExpressionWrapper(Now() + delta, output_field=DateTimeField())


# A JSON escape of NUL that is not itself an escaped backslash followed by "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode(value: Any) -> str:
    """Redact, then serialise for storage, enforcing the payload size limit."""
    try:
        redacted = redact(value)
    except RecursionError:
        raise too_deep() from None
    text = canonical_json(redacted, limit=settings.DURABLERUNS_MAX_PAYLOAD_BYTES)
    if connection.vendor == "postgresql" and _NUL_ESCAPE.search(text):
        raise SerializationError("not storable: Postgres JSON cannot hold a NUL (\\u0000)")
    return text


def normalise(value: Any) -> Any:
    """The value exactly as a replay will see it: keys sorted, tuples as lists."""
    return json.loads(canonical_json(value))


def redacted(value: Any) -> Any:
    """The value as it may be stored in a JSON field: secrets removed, normalised."""
    return normalise(redact(value))


# --- Leases ------------------------------------------------------------------


def acquire_lease(run_id: str, owner: str) -> Lease | None:
    """Take the run if it is executable, due, and nobody holds a live lease."""
    ttl = settings.DURABLERUNS_LEASE_TTL
    taken = (
        Run.objects.filter(pk=run_id, status__in=Run.EXECUTABLE, kind=Run.Kind.NATIVE)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=Now()))
        .update(
            lease_owner=owner,
            lease_expires_at=_in(ttl),
            fence=F("fence") + 1,
            leases_taken=F("leases_taken") + 1,
            status=Run.Status.RUNNING,
            wake_at=None,
            started_at=Coalesce(F("started_at"), Now()),
            updated_at=Now(),
        )
    )
    if not taken:
        return None
    fence = Run.objects.filter(pk=run_id, lease_owner=owner).values_list("fence", flat=True).first()
    if fence is None:
        return None
    lease = Lease(run_id, owner, fence, ttl)
    lease.extended()
    return lease


def renew_lease(lease: Lease) -> bool:
    renewed = Run.objects.filter(
        pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner, status=Run.Status.RUNNING
    ).update(lease_expires_at=_in(lease.ttl))
    if renewed:
        lease.extended()
    else:
        lease.lost = True
    return bool(renewed)


def release(lease: Lease, status: str, **fields: Any) -> bool:
    """Leave the run in `status`, giving up the lease; False if the lease was lost."""
    held = Run.objects.filter(pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner)
    with _confirmed(lease):
        updated = held.update(
            status=status, lease_owner="", lease_expires_at=None, updated_at=Now(), **fields
        )
    if not updated:
        lease.lost = True
        log.warning("run %s: lease lost before release to %s", lease.run_id, status)
    return bool(updated)


# --- History -----------------------------------------------------------------


def load_history(run_id: str) -> dict[int, Step]:
    return {step.position: step for step in Step.objects.filter(run_id=run_id).order_by("position")}


def load_effects(run_id: str) -> dict[int, Effect]:
    return {effect.position: effect for effect in Effect.objects.filter(run_id=run_id)}


# --- Fenced writes -------------------------------------------------------------

_STEP_COLUMNS = (
    "run_id, position, step_id, kind, name, tool, fingerprint, input, result, error, "
    "attempts, started_at, finished_at, schema_version, lease_number, executed_by"
)
_EFFECT_COLUMNS = (
    "run_id, position, idempotency_key, tool, tool_kind, fingerprint, args, state, "
    "attempts, started_at, resolution, note"
)


def _sql_dialect() -> tuple[str, str]:
    """(JSON parameter placeholder, row lock on the fence check) for this database."""
    return _dialect(connection.vendor)


@functools.cache
def _dialect(vendor: str) -> tuple[str, str]:
    if vendor == "postgresql":
        return "%s::jsonb", " FOR SHARE"
    return "%s", ""


@functools.cache
def _commit_step_sql(vendor: str) -> str:
    json_param, lock = _dialect(vendor)
    return (
        f"INSERT INTO durableruns_step ({_STEP_COLUMNS}) "
        f"SELECT id, %s, %s, %s, %s, %s, %s, {json_param}, {json_param}, {json_param}, "
        f"%s, %s, %s, %s, leases_taken, lease_owner {_fence_guard()}{lock}"
    )


def _fence_guard() -> str:
    return "FROM durableruns_run WHERE id = %s AND fence = %s AND lease_owner = %s"


@contextmanager
def _confirmed(lease: Lease) -> Iterator[None]:
    """Turn a dropped connection into StoreUnavailable: the write may or may not have
    committed, which only the next executor, reading Postgres, can tell."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        lease.lost = True
        raise StoreUnavailable(f"run {lease.run_id}: database connection failed ({exc})") from None


def _execute_fenced(sql: str, params: list[Any], lease: Lease) -> None:
    try:
        with _confirmed(lease):
            rowcount = _execute_hot(sql, params)
    except IntegrityError as exc:
        # Another executor committed this slot: we are the zombie.
        lease.lost = True
        raise LeaseLost(f"run {lease.run_id}: slot already written ({exc})") from None
    if rowcount != 1:
        lease.lost = True
        raise LeaseLost(f"run {lease.run_id}: fence {lease.fence} is stale")


def _execute_hot(sql: str, params: list[Any]) -> int:
    """Run a hot-path write; returns its row count.

    On Postgres the statement goes to psycopg as a prepared statement with
    server-side parameters: Django's cursor binds parameters on the client and
    Postgres parses and plans the fenced INSERT ... SELECT on every step, which
    cost a fifth of a step checkpoint (see docs/benchmarks.md). Errors still
    surface as Django's database exceptions. Set the database OPTIONS
    `prepare_threshold` to None (e.g. behind a transaction-pooling PgBouncer) to
    keep Django's path.
    """
    # One lookup of this thread's connection: each attribute read through Django's
    # `connection` proxy looks the connection up again, which showed in the profile.
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql" or _prepare_disabled(db):
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount
    db.ensure_connection()
    # Django's cursors bind on the client (and cannot prepare): use psycopg's own.
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.rowcount


def _prepare_disabled(db: Any) -> bool:
    options = db.settings_dict.get("OPTIONS", {})
    return "prepare_threshold" in options and options["prepare_threshold"] is None


def _db_time(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


@dataclass
class StepOutcome:
    position: int
    step_id: str
    kind: str
    name: str
    tool: str
    fingerprint: str
    input: Any
    result: Any
    error: Any
    attempts: int
    started_at: datetime
    finished_at: datetime


def commit_step(lease: Lease, outcome: StepOutcome) -> None:
    """Checkpoint one step: a single fenced INSERT ... SELECT, committed on its own."""
    db = connections[DEFAULT_DB_ALIAS]
    adapt_time = db.ops.adapt_datetimefield_value
    params = [
        outcome.position,
        outcome.step_id,
        outcome.kind,
        outcome.name,
        outcome.tool,
        outcome.fingerprint,
        _json_or_null(outcome.input),
        _json_or_null(outcome.result),
        _json_or_null(outcome.error),
        outcome.attempts,
        adapt_time(outcome.started_at),
        adapt_time(outcome.finished_at),
        CHECKPOINT_SCHEMA_VERSION,
        lease.run_id,
        lease.fence,
        lease.owner,
    ]
    _execute_fenced(_commit_step_sql(db.vendor), params, lease)


def _json_or_null(value: Any) -> str | None:
    return None if value is None else encode(value)


def start_effect(
    lease: Lease, *, position: int, key: str, tool: str, tool_kind: str, fingerprint: str, args: Any
) -> None:
    """Write-ahead: the `started` row commits before the tool is called (invariant 4)."""
    json_param, lock = _sql_dialect()
    sql = (
        f"INSERT INTO durableruns_effect ({_EFFECT_COLUMNS}) "
        f"SELECT id, %s, %s, %s, %s, %s, {json_param}, 'started', 1, %s, '', '' "
        f"{_fence_guard()}{lock}"
    )
    params = [
        position,
        key,
        tool,
        tool_kind,
        fingerprint,
        encode(args),
        _db_time(timezone.now()),
        lease.run_id,
        lease.fence,
        lease.owner,
    ]
    _execute_fenced(sql, params, lease)


def restart_effect(lease: Lease, key: str) -> None:
    """Count another attempt of an effect that is about to be called again."""
    _fenced_effect_update(lease, key, "state = 'started', attempts = attempts + 1", [])


def _fenced_effect_update(lease: Lease, key: str, assignments: str, params: list[Any]) -> None:
    _, lock = _sql_dialect()
    sql = (
        f"UPDATE durableruns_effect SET {assignments} "
        f"WHERE idempotency_key = %s AND EXISTS (SELECT 1 {_fence_guard()}{lock})"
    )
    _execute_fenced(sql, [*params, key, lease.run_id, lease.fence, lease.owner], lease)


def finish_effect(
    lease: Lease,
    key: str,
    *,
    state: str,
    result: Any = None,
    error: Any = None,
    step: StepOutcome | None = None,
) -> None:
    """Commit the effect's outcome and, when there is one, its step, in one transaction."""
    json_param, _ = _sql_dialect()
    # A dropped connection fails the COMMIT (or the rollback) outside the inner
    # statements, so the whole transaction is watched, not just each statement.
    with _confirmed(lease), transaction.atomic():
        _fenced_effect_update(
            lease,
            key,
            f"state = %s, result = {json_param}, error = {json_param}, finished_at = %s",
            [state, _json_or_null(result), _json_or_null(error), _db_time(timezone.now())],
        )
        if step is not None:
            commit_step(lease, step)
        position = step.position if step else -1
        crashpoints.crash_point(crashpoints.DURING_RESULT_COMMIT, lease.run_id, position)


def set_effect_state(lease: Lease, key: str, state: str, *, error: Any = None) -> None:
    json_param, _ = _sql_dialect()
    _fenced_effect_update(
        lease, key, f"state = %s, error = {json_param}", [state, _json_or_null(error)]
    )
