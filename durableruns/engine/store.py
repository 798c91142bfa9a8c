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
import hashlib
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast

import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    router,
    transaction,
)
from django.db.models import CharField, DateTimeField, ExpressionWrapper, F, Func, Model, Q, Value
from django.db.models.functions import Coalesce, Now
from django.db.models.sql import Query, UpdateQuery
from django.utils import timezone

from ..models import CHECKPOINT_SCHEMA_VERSION, Effect, Run, Step
from . import crashpoints, doorbell, vault
from .errors import LeaseLost, PayloadTooLarge, SerializationError, StoreUnavailable
from .keys import canonical_json, parsed_json, too_deep
from .redaction import current_rules, redact, redact_with

log = logging.getLogger(__name__)


@dataclass
class Lease:
    run_id: str
    owner: str
    fence: int
    ttl: float
    valid_until: float = field(default=0.0)  # time.monotonic() deadline, a local safety margin
    lost: bool = False
    # The run's row as taking the lease left it (acquire_lease reads it in the same
    # statement), so the executor need not read it again.
    record: Run | None = field(default=None, repr=False, compare=False)

    def ensure_held(self) -> None:
        """Stop before the next effect if the lease is gone or may have expired."""
        if self.lost or time.monotonic() >= self.valid_until:
            self.lost = True
            raise LeaseLost(f"lease on run {self.run_id} lost (fence {self.fence})")

    def extended(self, since: float | None = None) -> None:
        """Renewed by a statement sent at monotonic time `since` (default: now)."""
        # Keep a margin: database time decides, this clock only errs on the safe side.
        self.valid_until = (time.monotonic() if since is None else since) + self.ttl * 0.8


def _in(seconds: float) -> ExpressionWrapper:
    delta = Value(timedelta(seconds=seconds))
    return ExpressionWrapper(Now() + delta, output_field=DateTimeField())


# A JSON escape of NUL that is not itself an escaped backslash followed by "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode(value: Any) -> str:
    """Serialise for storage, enforcing the payload size limit (before any redaction,
    so a huge value is refused before anything scans it)."""
    return storable(canonical_json(value))


def storable(text: str, what: str = "payload") -> str:
    """`text` (canonical JSON) if it fits the size limit and Postgres can hold it."""
    limit = settings.DURABLERUNS_MAX_PAYLOAD_BYTES
    if len(text) > limit // 4 and (size := len(text.encode())) > limit:
        raise PayloadTooLarge(
            f"{what} is {size} bytes, over the {limit}-byte limit (the setting "
            "DURABLERUNS_MAX_PAYLOAD_BYTES; or store the data elsewhere and return a reference)"
        )
    # The substring test first: the regex alone cost 2 ms on a 20 KB result.
    if "\\u0000" in text and connection.vendor == "postgresql" and _NUL_ESCAPE.search(text):
        raise SerializationError("not storable: Postgres JSON cannot hold a NUL (\\u0000)")
    return text


def seal_fields(
    texts: dict[str, str] | None = None, **fields: Any
) -> tuple[dict[str, str | None], str]:
    """Each field's stored JSON text (its redacted view) and the row's `secrets`.

    A field is serialised once (or not at all when `texts` has its canonical JSON
    already), and that text is screened whole by one linear scan; only a field the
    screen flags is walked value by value. A field redaction changes is stored as
    the view, and its original goes into the sealed `secrets` (engine/vault.py), so
    a replay hands agent code exactly the original.
    """
    rules = current_rules()
    views: dict[str, str | None] = {}
    originals: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            views[name] = None
            continue
        known = (texts or {}).get(name)
        what = "the arguments' JSON" if name == "args" else f"the {name}"
        text = storable(known if known is not None else canonical_json(value), what)
        if not rules.flags(text):
            views[name] = text
            continue
        try:
            view = redact_with(value, rules)
        except RecursionError:
            raise too_deep() from None
        if view is value:
            views[name] = text
        else:
            views[name] = canonical_json(view)
            originals[name] = value
    return views, vault.seal(originals)


def normalised_text(value: Any) -> tuple[Any, str]:
    """normalise(value) and its canonical JSON, from one serialisation: the commit
    reuses the text (seal_fields(texts=...)) instead of serialising again."""
    text, parsed = parsed_json(value)
    if parsed is None:
        parsed = json.loads(text, parse_float=_as_jsonb_reads)
    return parsed, text


def normalise(value: Any) -> Any:
    """The value exactly as a replay will see it: keys sorted, tuples as lists, and
    numbers as a Postgres jsonb column gives them back (see _as_jsonb_reads)."""
    return normalised_text(value)[0]


def _as_jsonb_reads(text: str) -> float | int:
    """jsonb keeps numbers as `numeric`: 7.205759403792382e+16 comes back as the integer
    72057594037923820. Python writes a float with a positive exponent only when it is
    an integral value (from 1e16 on), so such a float is given as that integer from
    the first execution on, and a replay returns exactly the same."""
    if "e+" in text or "E+" in text:
        return int(Decimal(text))
    return float(text)


def redacted(value: Any) -> Any:
    """The value with secrets destroyed, normalised: for what nothing replays (audit
    before/after, run errors, comments)."""
    try:
        return normalise(redact(value))
    except RecursionError:
        raise too_deep() from None


def stored(name: str, value: Any) -> tuple[Any, str]:
    """(view, secrets) for one JSON field `name` saved through the ORM (the run input)."""
    views, secrets = seal_fields(**{name: value})
    view = views[name]
    return (None if view is None else json.loads(view)), secrets


# --- Leases ------------------------------------------------------------------


def acquire_lease(run_id: str, owner: str) -> Lease | None:
    """Take the run if it is executable, due, and nobody holds a live lease."""
    ttl = settings.DURABLERUNS_LEASE_TTL
    taken = _instances(Run, DEFAULT_DB_ALIAS, *_acquire_sql(DEFAULT_DB_ALIAS, ttl, run_id, owner))
    if not taken:
        return None
    lease = Lease(run_id, owner, taken[0].fence, ttl, record=taken[0])
    lease.extended()
    return lease


_RUN_ID, _OWNER = "\x00lease-run-id", "\x00lease-owner"


def _acquire_sql(alias: str, ttl: float, run_id: str, owner: str) -> tuple[str, list[Any]]:
    sql, params = _acquire_template(alias, ttl)
    return sql, [run_id if p == _RUN_ID else owner if p == _OWNER else p for p in params]


@functools.cache
def _acquire_template(alias: str, ttl: float) -> tuple[str, list[Any]]:
    """The lease-taking UPDATE ... RETURNING the row, built by Django once per database
    and TTL: assembling its conditions and expressions cost ~1 ms of CPU per run, more
    than executing it, and reading the fence and then the row back took two more
    round trips."""
    taking = (
        Run.objects.filter(pk=_RUN_ID, status__in=Run.EXECUTABLE, kind=Run.Kind.NATIVE)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=Now()))
    )
    query = cast(UpdateQuery, taking.query.chain(UpdateQuery))  # as QuerySet.update()
    query.add_update_values(
        {
            "lease_owner": _OWNER,
            "lease_expires_at": _in(ttl),
            "fence": F("fence") + 1,
            "leases_taken": F("leases_taken") + 1,
            "status": Run.Status.RUNNING,
            "wake_at": None,
            "started_at": Coalesce(F("started_at"), Now()),
            "updated_at": Now(),
        }
    )
    sql, params = query.get_compiler(using=alias).as_sql()
    if [p for p in params if p in (_RUN_ID, _OWNER)] not in ([_OWNER, _RUN_ID], [_RUN_ID, _OWNER]):
        raise RuntimeError("the lease query must take the run id and owner once each")
    return f"{sql} RETURNING *", list(params)


def leased(run_id: str, owner: str, ttl: float) -> Lease | None:
    """The lease `owner` took on the run just now (None if it is already gone)."""
    fence = Run.objects.filter(pk=run_id, lease_owner=owner).values_list("fence", flat=True).first()
    if fence is None:
        return None
    lease = Lease(run_id, owner, fence, ttl)
    lease.extended()
    return lease


def renew_lease(lease: Lease) -> bool:
    renew_leases([lease])
    return not lease.lost


def renew_leases(leases: list[Lease]) -> None:
    """Extend every lease in `leases` (one UPDATE per TTL, whatever their number); a
    lease not renewed is marked lost, and its executor stops before its next effect.

    An owner is unique to one taking of a lease (engine/liveness.py), so it names the
    lease without its fence. A lease that expired meanwhile (a hung process, or the
    sweeper found the process dead) is never extended again: someone may have it now."""
    sent = time.monotonic()
    by_ttl: dict[float, list[Lease]] = {}
    for lease in leases:
        by_ttl.setdefault(lease.ttl, []).append(lease)
    for ttl, group in by_ttl.items():
        owners = [lease.owner for lease in group]
        live = Run.objects.filter(
            lease_owner__in=owners, status=Run.Status.RUNNING, lease_expires_at__gt=Now()
        )
        renewed: Any = owners
        if live.update(lease_expires_at=_in(ttl)) != len(group):
            renewed = set(live.values_list("lease_owner", flat=True))
        for lease in group:
            if lease.owner in renewed:
                lease.extended(since=sent)
            else:
                lease.lost = True


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


def escalation_ended(run_id: str) -> dict[str, Any]:
    """The fields that end a run's escalation, its wait added to `escalated_seconds`
    (a person's time, which max_duration leaves out). The caller holds the row's lock
    and writes them with the status that ends the escalation."""
    since = Run.objects.filter(pk=run_id).values_list("escalated_at", flat=True).first()
    if since is None:
        return {}
    waited = max((timezone.now() - since).total_seconds(), 0.0)
    return {"escalated_at": None, "escalated_seconds": F("escalated_seconds") + waited}


def record_spend(lease: Lease, totals: dict[str, Any]) -> None:
    """Write the run's token and cost totals (absolute, so a later pass may write them
    again); a lost lease writes nothing and is noticed before the next effect."""
    held = Run.objects.filter(pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner)
    with _confirmed(lease):
        if not held.update(**totals):
            lease.lost = True


def record_handed_back(lease: Lease, seconds: float) -> bool:
    """Add a finished hand-back's wait to the run and clear its reason (handback.py);
    False, and nothing written, if the lease was lost."""
    held = Run.objects.filter(pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner)
    with _confirmed(lease):
        updated = held.update(
            handed_back_seconds=F("handed_back_seconds") + seconds, last_error=None
        )
    if not updated:
        lease.lost = True
    return bool(updated)


def release_escalated(lease: Lease, **fields: Any) -> str | None:
    """Release to `escalated`, or to `queued` if every unknown effect was resolved
    since this executor marked it (a person can answer between the two writes).

    The run row is locked first and the effects read after, in a statement of their
    own; escalations.resolve records the effect and then locks the run. So whichever
    commits second sees the other: the resolver wakes an escalated run, or this sees
    the resolution and queues the run. Returns the status left, None if the lease was
    lost."""
    with _confirmed(lease), transaction.atomic():
        held = Run.objects.select_for_update().filter(
            pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner
        )
        if not list(held.values_list("pk", flat=True)):
            lease.lost = True
            return None
        if Effect.objects.filter(run_id=lease.run_id, state=Effect.State.UNKNOWN).exists():
            release(lease, Run.Status.ESCALATED, escalated_at=Now(), **fields)
            return Run.Status.ESCALATED
        release(lease, Run.Status.QUEUED, rang_at=Now(), **fields)
        doorbell.ring(lease.run_id)
        return Run.Status.QUEUED


# --- Owner liveness (advisory locks) -------------------------------------------
#
# Every worker process holds a Postgres session advisory lock keyed by its process
# owner id, on a session of its own, for its whole life (engine/liveness.py); the
# owner of each lease it takes is "<process owner>/<suffix>". A process that dies
# closes that session and Postgres frees the lock at once, so "running, live lease,
# its process's lock free" means the owner is dead: the sweeper expires the leases of
# all that process's runs without waiting out the TTL (take_over_dead_owners). A hung
# or partitioned process keeps its session and its lock; the lease TTL catches it, as
# before. Session locks need a session: behind a transaction-mode pooler set
# DURABLERUNS_DEAD_OWNER_DETECTION to off.


def owner_detection_enabled() -> bool:
    return settings.DURABLERUNS_DEAD_OWNER_DETECTION and connection.vendor == "postgresql"


def process_lock_key(process: str) -> int:
    """A signed 64-bit advisory lock key for a worker process (collisions negligible)."""
    digest = hashlib.sha256(f"durableruns:process:{process}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# The process part of a lease owner ("<process>/<nonce>", engine/liveness.py): everything
# before its last "/"; an owner with none names no process (NULL).
_PROCESS_OF_OWNER = "^(.*)/[^/]*$"


def _scalar(sql: str, params: list[Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def take_over_dead_owners() -> list[str]:
    """Expire the lease of every running run whose owner process's lock is free (it
    died); returns their ids. The next executor takes the lease and bumps the fence,
    exactly as after a TTL expiry, so a late write of the old owner is still rejected.
    One lock probe per live process, whatever the number of runs it holds: the
    processes are read in SQL (it read the owners of 500 runs, so among a fleet's
    thousands of live runs a dead process could go unseen until its leases expired)."""
    if not owner_detection_enabled():
        return []
    running = Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__gte=Now())
    live = running.annotate(
        process=Func(
            "lease_owner", Value(_PROCESS_OF_OWNER), function="substring", output_field=CharField()
        )
    )
    # An owner naming no process (a worker of an older release) falls back to the TTL.
    processes = live.exclude(process__isnull=True).exclude(process="")
    dead: list[str] = []
    for process in processes.order_by().values_list("process", flat=True).distinct():
        # Taking the lock in a transaction frees it at commit: the process is dead, and
        # nothing of its can take it again.
        with transaction.atomic():
            if not _scalar("SELECT pg_try_advisory_xact_lock(%s)", [process_lock_key(process)]):
                continue
            run_ids = list(live.filter(process=process).values_list("id", flat=True))
            running.filter(pk__in=run_ids).update(lease_expires_at=Now(), rang_at=Now())
            for run_id in run_ids:
                doorbell.ring(run_id)
            dead += run_ids
    return dead


# --- Sessions ------------------------------------------------------------------


def release_connection() -> None:
    """Give this thread's Postgres session back to the pool while agent code waits on
    a model or a tool (invariant 17): a waiting run then holds no session, and the
    next statement takes one again (a few microseconds). Without a pool (SQLite, or
    DURABLERUNS_DB_POOL_SIZE unset) it does nothing: a reconnect per step would cost
    more than the session. Never inside a transaction, which needs its session."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is not None and not db.in_atomic_block and getattr(db, "pool", None):
        db.close()


# --- History -----------------------------------------------------------------


def load_history(run_id: str) -> dict[int, Step]:
    """The run's steps as agent code saw them: sealed originals put back (executor only)."""
    return {step.position: vault.unseal_into(step) for step in _rows_of_run(Step, run_id)}


def load_effects(run_id: str) -> dict[int, Effect]:
    return {effect.position: vault.unseal_into(effect) for effect in _rows_of_run(Effect, run_id)}


def _rows_of_run[M: (Step, Effect)](model: type[M], run_id: str) -> list[M]:
    alias = router.db_for_read(model)
    return _instances(model, alias, _rows_of_run_sql(model, alias), [run_id])


def _instances[M: Model](model: type[M], alias: str, sql: str, params: list[Any]) -> list[M]:
    """The rows `sql` returns, as `model` instances made as Model.objects.raw() makes
    them, but with the columns' plan built once (_row_plan): raw() built it again per
    query, 0.3 ms of CPU for a step's columns and 0.6 ms for a run's, more than the
    query itself."""
    db = connections[alias]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        columns = tuple(column[0] for column in cursor.description)
        rows = cursor.fetchall()
    names, positions, converters = _row_plan(model, alias, columns)
    found = []
    for row in rows:
        values = [row[position] for position in positions]
        for index, (functions, expression) in converters.items():
            for function in functions:
                values[index] = function(values[index], expression, db)
        found.append(model.from_db(alias, names, values))
    return found


@functools.cache
def _row_plan(
    model: type[Model], alias: str, columns: tuple[str, ...]
) -> tuple[list[str], list[int], dict[int, tuple[list[Any], Any]]]:
    """For rows of `columns`: the model's fields among them (in the model's order, as
    from_db takes them), where each is in a row, and the database's and the fields'
    converters of their values (JSON text to objects, and SQLite's types)."""
    fields = [field for field in model._meta.concrete_fields if field.column in columns]
    db = connections[alias]
    compiler = db.ops.compiler("SQLCompiler")(Query(model), db, alias)
    converters = compiler.get_converters([field.get_col(model._meta.db_table) for field in fields])
    return (
        [field.attname for field in fields],
        [columns.index(field.column) for field in fields],
        converters,
    )


@functools.cache
def _rows_of_run_sql(model: type[Step | Effect], alias: str) -> str:
    """Every column of one run's rows of `model`, in position order; built by Django once
    per model and database: assembling the two reads cost more CPU than running them
    (half of what a new run's executor spends in Python before its first step)."""
    query = model._base_manager.filter(run_id=_RUN_ID).order_by("position").query
    sql, params = query.get_compiler(using=alias).as_sql()
    if list(params) != [_RUN_ID]:
        raise RuntimeError("the history query must take the run id once")
    return sql


# --- Fenced writes -------------------------------------------------------------

_STEP_COLUMNS = (
    "run_id, position, step_id, kind, name, tool, fingerprint, input, result, error, secrets, "
    "attempts, started_at, finished_at, schema_version, fan_out, lease_number, executed_by, "
    "attempt_times"
)
_EFFECT_COLUMNS = (
    "run_id, position, idempotency_key, tool, tool_kind, fingerprint, args, secrets, state, "
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
        f"SELECT id, %s, %s, %s, %s, %s, %s, {json_param}, {json_param}, {json_param}, %s, "
        f"%s, %s, %s, %s, %s, leases_taken, lease_owner, "
        # The failed attempts' times move from the run row in the same fenced statement.
        f"CASE WHEN retry_position = %s THEN retry_attempt_times END {_fence_guard()}{lock}"
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
    """Run a hot-path write; returns its row count (see _run_hot)."""
    return _run_hot(sql, params, lambda cursor: cursor.rowcount)


def _run_hot(sql: str, params: list[Any], read: Any) -> Any:
    """Run a hot-path statement; returns what `read(cursor)` reads from it.

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
    if db.vendor != "postgresql" or prepared_statements_disabled(db):
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return read(cursor)
    db.ensure_connection()
    # Django's cursors bind on the client (and cannot prepare): use psycopg's own.
    with db.wrap_database_errors:
        hot = _hot_cursor(db)
        hot.execute(sql, params, prepare=True)
        return read(hot)


def _hot_cursor(db: Any) -> psycopg.Cursor[Any]:
    """One psycopg cursor per connection, kept for the hot path: a new cursor per step
    looked its parameter dumpers up again every time (a tenth of a trivial step's CPU).
    A new connection (Django reconnects after an error or between tasks) gets a new one."""
    kept = getattr(db, "_durableruns_hot_cursor", None)
    if kept is None or kept.connection is not db.connection or kept.closed:
        if db.connection.prepare_threshold is None:
            # Django opens connections with prepare_threshold=None, and psycopg then
            # ignores prepare=True: the fenced INSERT was parsed and planned on every
            # step (0.15 ms of a 0.5 ms step). A threshold no query reaches keeps
            # Django's own queries unprepared while prepare=True takes effect.
            db.connection.prepare_threshold = ONLY_WHEN_ASKED
        kept = psycopg.Cursor(db.connection)
        db._durableruns_hot_cursor = kept
    return kept


# A prepare_threshold no query reaches: psycopg prepares only what asks for it.
ONLY_WHEN_ASKED = 2**62


def prepared_statements_disabled(db: Any) -> bool:
    """Whether the database OPTIONS turn prepared statements off (prepare_threshold
    None, e.g. behind a transaction-pooling PgBouncer)."""
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
    result_text: str | None = None  # the result's canonical JSON, when already made
    fan_out: int | None = None  # a parallel branch: its fan-out's first position


def commit_step(lease: Lease, outcome: StepOutcome) -> None:
    """Checkpoint one step: a single fenced INSERT ... SELECT, committed on its own."""
    db = connections[DEFAULT_DB_ALIAS]
    adapt_time = db.ops.adapt_datetimefield_value
    texts = None if outcome.result_text is None else {"result": outcome.result_text}
    views, secrets = seal_fields(
        texts, input=outcome.input, result=outcome.result, error=outcome.error
    )
    params = [
        outcome.position,
        outcome.step_id,
        outcome.kind,
        outcome.name,
        outcome.tool,
        outcome.fingerprint,
        views["input"],
        views["result"],
        views["error"],
        secrets,
        outcome.attempts,
        adapt_time(outcome.started_at),
        adapt_time(outcome.finished_at),
        CHECKPOINT_SCHEMA_VERSION,
        outcome.fan_out,
        outcome.position,
        lease.run_id,
        lease.fence,
        lease.owner,
    ]
    _execute_fenced(_commit_step_sql(db.vendor), params, lease)


def start_effect(
    lease: Lease, *, position: int, key: str, tool: str, tool_kind: str, fingerprint: str, args: Any
) -> None:
    """Write-ahead: the `started` row commits before the tool is called (invariant 4)."""
    json_param, lock = _sql_dialect()
    sql = (
        f"INSERT INTO durableruns_effect ({_EFFECT_COLUMNS}) "
        f"SELECT id, %s, %s, %s, %s, %s, {json_param}, %s, 'started', 1, %s, '', '' "
        f"{_fence_guard()}{lock}"
    )
    views, secrets = seal_fields(args=args)
    params = [
        position,
        key,
        tool,
        tool_kind,
        fingerprint,
        views["args"],
        secrets,
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
    args: Any,
    result: Any = None,
    error: Any = None,
    step: StepOutcome | None = None,
) -> None:
    """Commit the effect's outcome and, when there is one, its step, in one transaction.
    `args` are sealed again with the outcome: one token holds the row's secrets."""
    json_param, _ = _sql_dialect()
    views, secrets = seal_fields(args=args, result=result, error=error)
    # A dropped connection fails the COMMIT (or the rollback) outside the inner
    # statements, so the whole transaction is watched, not just each statement.
    with _confirmed(lease), transaction.atomic():
        _fenced_effect_update(
            lease,
            key,
            f"state = %s, result = {json_param}, error = {json_param}, secrets = %s, "
            "finished_at = %s",
            [state, views["result"], views["error"], secrets, _db_time(timezone.now())],
        )
        if step is not None:
            commit_step(lease, step)
        position = step.position if step else -1
        crashpoints.crash_point(crashpoints.DURING_RESULT_COMMIT, lease.run_id, position)


def set_effect_state(lease: Lease, key: str, state: str, *, error: Any = None) -> None:
    json_param, _ = _sql_dialect()
    # Only the engine's own explanation goes here (no secrets): stored as the view.
    view = None if error is None else canonical_json(redacted(error))
    _fenced_effect_update(lease, key, f"state = %s, error = {json_param}", [state, view])
