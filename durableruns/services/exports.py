"""The exported form of a run: one JSON document, also the scriptable way to inspect it.

`export_run` writes it, `import_run` reads it back into another database (so a
production run can be replayed on a laptop), and `history_from_export` turns it into
unsaved rows for a dry replay that touches no database at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict

from ..engine import vault
from ..engine.keys import MAX_DEPTH, fingerprint
from ..engine.runs import RUN_ID_PATTERN
from ..models import Approval, AuditEvent, Effect, Run, Step
from . import audit

EXPORT_FORMAT = 1
_RUN_FIELDS = (
    "id",
    "agent",
    "agent_version",
    "input",
    "status",
    "result",
    "error",
    "max_steps",
    "max_duration_seconds",
    "steps_used",
    "fence",
    "parent",
    "fork_position",
    "sandbox",
    "tokens_in",
    "tokens_out",
    "tokens_cached",
    "max_tokens",
    "retry_position",
    "retry_attempts",
    "retry_attempt_times",
    "last_error",
    "secrets",  # ciphertext: an import under the same keys can still replay
)
_STEP_FIELDS = (
    "position",
    "step_id",
    "kind",
    "name",
    "tool",
    "fingerprint",
    "input",
    "result",
    "error",
    "secrets",
    "attempts",
    "attempt_times",
    "schema_version",
    "fan_out",
)
_APPROVAL_FIELDS = (
    "position",
    "name",
    "summary",
    "payload",
    "allowed",
    "schema",
    "guards",
    "four_eyes",
    "state",
    "decision",
    "decider_name",
    "comment",
    "edited_payload",
    "on_expiry",
    "secrets",
)
_EFFECT_FIELDS = (
    "position",
    "idempotency_key",
    "tool",
    "tool_kind",
    "fingerprint",
    "args",
    "state",
    "result",
    "error",
    "secrets",
    "attempts",
    "resolution",
    "note",
)


class ExportError(ValueError):
    """An exported document that cannot be read back; the message names the field."""


def _times(obj: Any, *names: str) -> dict[str, str | None]:
    return {n: (getattr(obj, n).isoformat() if getattr(obj, n) else None) for n in names}


def export_run(run: Run) -> dict[str, Any]:
    Run.fill_langgraph_activity([run])
    return {
        "format": EXPORT_FORMAT,
        "run": {
            **model_to_dict(run, fields=_RUN_FIELDS),
            "id": run.id,
            # Dollars as decimal strings: a float would round them.
            "cost": f"{run.cost:f}",
            "max_cost": None if run.max_cost is None else f"{run.max_cost:f}",
            **_times(run, "created_at", "started_at", "finished_at", "redacted_at"),
        },
        "steps": [
            {
                **model_to_dict(step, fields=_STEP_FIELDS),
                **_times(step, "started_at", "finished_at"),
            }
            for step in run.steps.order_by("position")
        ],
        "effects": [
            {
                "id": effect.pk,
                **model_to_dict(effect, fields=_EFFECT_FIELDS),
                "resolved_by": effect.resolved_by.get_username() if effect.resolved_by else None,
                **_times(effect, "started_at", "finished_at", "resolved_at"),
            }
            for effect in run.effects.select_related("resolved_by").order_by("position", "pk")
        ],
        "approvals": [
            {
                **model_to_dict(approval, fields=_APPROVAL_FIELDS),
                **_times(approval, "created_at", "decided_at", "expires_at"),
            }
            for approval in run.approvals.order_by("position")
        ],
        "audit": [_audit_event(event) for event in AuditEvent.objects.for_run(run)],
    }


def _audit_event(event: AuditEvent) -> dict[str, Any]:
    return {
        "actor": event.actor_name,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "before": event.before,
        "after": event.after,
        **_times(event, "created_at"),
    }


# --- Reading a document back -----------------------------------------------------


def _require(obj: Mapping[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ExportError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        names = "/".join(t.__name__ for t in _tuple(types))
        raise ExportError(f"{where}: field {key!r} must be {names}, not {type(value).__name__}")
    return value


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _choice(obj: Mapping[str, Any], key: str, choices: Any, where: str) -> str:
    value = _require(obj, key, str, where)
    if value not in choices.values:
        raise ExportError(f"{where}: {key} {value!r} is not one of {sorted(choices.values)}")
    return value


def _time(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> Any:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ExportError(f"{where}: field {key!r} must be an ISO 8601 time")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ExportError(f"{where}: field {key!r} is not an ISO 8601 time: {value!r}") from None
    if parsed.tzinfo is None:
        raise ExportError(f"{where}: field {key!r} must carry a time zone")
    return parsed


def _count(obj: Mapping[str, Any], key: str, where: str) -> None:
    """An optional token count: a non-negative integer that fits its column."""
    value = obj.get(key)
    if value is None:
        return
    if type(value) is not int or not 0 <= value < 2**31:
        raise ExportError(f"{where}: field {key!r} must be a whole number of tokens (0 to 2^31)")


def _dollars(obj: Mapping[str, Any], key: str) -> Decimal | None:
    """An optional amount of dollars, written as a decimal string (or a number)."""
    value = obj.get(key)
    if value is None:
        return None
    try:
        amount = Decimal(str(value)) if isinstance(value, (str, int, float)) else None
    except InvalidOperation:
        amount = None
    if isinstance(value, bool) or amount is None or not amount.is_finite() or amount < 0:
        raise ExportError(f"run: field {key!r} must be a non-negative amount of dollars")
    if amount >= 10**8:
        raise ExportError(f"run: field {key!r} is over 100,000,000 dollars")
    return amount.quantize(Decimal("1e-10"))


def validate(doc: Any) -> dict[str, Any]:
    """Check the document's shape; raises ExportError naming the first bad field."""
    if not isinstance(doc, Mapping):
        raise ExportError("an exported run must be a JSON object")
    if doc.get("format") != EXPORT_FORMAT:
        raise ExportError(
            f"unsupported export format {doc.get('format')!r} "
            f"(this version reads format {EXPORT_FORMAT})"
        )
    run = _require(doc, "run", dict, "document")
    run_id = _require(run, "id", str, "run")
    if not RUN_ID_PATTERN.match(run_id):
        raise ExportError(f"run: id {run_id!r} is not a valid run id")
    for key in ("agent", "agent_version"):
        _require(run, key, str, "run")
    _require(run, "input", dict, "run")
    _choice(run, "status", Run.Status, "run")
    _require(run, "max_steps", int, "run")
    _require(run, "max_duration_seconds", (int, float), "run")
    _shallow(run, "run")
    for key in ("tokens_in", "tokens_out", "tokens_cached", "max_tokens"):
        _count(run, key, "run")
    for key in ("cost", "max_cost"):
        _dollars(run, key)
    steps = _require(doc, "steps", list, "document")
    positions = [_validate_step(step, i) for i, step in enumerate(steps)]
    if len(set(positions)) != len(positions):
        raise ExportError("steps: two steps share a position")
    effects = doc.get("effects", [])
    if not isinstance(effects, list):
        raise ExportError("document: field 'effects' must be list")
    for i, effect in enumerate(effects):
        _validate_effect(effect, i, run_id)
    approvals = doc.get("approvals", [])
    if not isinstance(approvals, list):
        raise ExportError("document: field 'approvals' must be list")
    for i, approval in enumerate(approvals):
        _validate_approval(approval, i)
    return dict(doc)


def _shallow(value: Any, where: str) -> None:
    """No value nests deeper than the engine ever stores (keys.MAX_DEPTH): deeper is a
    forged document, refused here rather than by a RecursionError later."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH + 2:  # the row object and its field add two levels
            raise ExportError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        children = item.values() if isinstance(item, Mapping) else item
        if isinstance(item, (Mapping, list)):
            stack.extend((child, depth + 1) for child in children)


def _validate_step(step: Any, index: int) -> int:
    where = f"steps[{index}]"
    if not isinstance(step, Mapping):
        raise ExportError(f"{where}: must be an object")
    _shallow(step, where)
    position = _require(step, "position", int, where)
    if position < 0:
        raise ExportError(f"{where}: position must not be negative")
    _choice(step, "kind", Step.Kind, where)
    for key in ("name", "step_id"):
        _require(step, key, str, where)
    for key in ("tool", "fingerprint"):
        if not isinstance(step.get(key, ""), str):
            raise ExportError(f"{where}: field {key!r} must be str")
    _time(step, "started_at", where)
    _time(step, "finished_at", where)
    return position


def _validate_effect(effect: Any, index: int, run_id: str) -> None:
    where = f"effects[{index}]"
    if not isinstance(effect, Mapping):
        raise ExportError(f"{where}: must be an object")
    _shallow(effect, where)
    position = _require(effect, "position", int, where)
    for key in ("idempotency_key", "tool", "tool_kind", "fingerprint"):
        _require(effect, key, str, where)
    # Keys are f"{run_id}:{position}-{name}:...": any other key is some other run's,
    # and storing it would make that run's effect look done (invariants 3 and 15).
    if not effect["idempotency_key"].startswith(f"{run_id}:{position}-"):
        raise ExportError(
            f"{where}: idempotency key {effect['idempotency_key'][:100]!r} does not belong "
            f"to run {run_id} at position {position}"
        )
    _choice(effect, "state", Effect.State, where)
    _time(effect, "started_at", where)


def _validate_approval(approval: Any, index: int) -> None:
    where = f"approvals[{index}]"
    if not isinstance(approval, Mapping):
        raise ExportError(f"{where}: must be an object")
    _shallow(approval, where)
    _require(approval, "position", int, where)
    _require(approval, "name", str, where)
    _choice(approval, "state", Approval.State, where)
    _time(approval, "created_at", where, required=False)
    _time(approval, "decided_at", where, required=False)
    _time(approval, "expires_at", where, required=False)


def _run_record(run: Mapping[str, Any]) -> Run:
    return Run(
        id=run["id"],
        agent=run["agent"],
        agent_version=run["agent_version"],
        input=run["input"],
        status=run["status"],
        result=run.get("result"),
        error=run.get("error"),
        max_steps=run["max_steps"],
        max_duration_seconds=float(run["max_duration_seconds"]),
        steps_used=int(run.get("steps_used") or 0),
        fork_position=run.get("fork_position"),
        sandbox=bool(run.get("sandbox", False)),
        tokens_in=int(run.get("tokens_in") or 0),
        tokens_out=int(run.get("tokens_out") or 0),
        tokens_cached=int(run.get("tokens_cached") or 0),
        cost=_dollars(run, "cost") or 0,
        max_tokens=run.get("max_tokens"),
        max_cost=_dollars(run, "max_cost"),
        last_error=run.get("last_error"),
        fence=int(run.get("fence") or 0),
        retry_position=run.get("retry_position"),
        retry_attempts=int(run.get("retry_attempts") or 0),
        retry_attempt_times=_attempt_times(run, "retry_attempt_times", "run"),
        started_at=_time(run, "started_at", "run", required=False),
        finished_at=_time(run, "finished_at", "run", required=False),
        redacted_at=_time(run, "redacted_at", "run", required=False),
        secrets=_secrets(run, "run"),
    )


def _secrets(obj: Mapping[str, Any], where: str) -> str:
    """The sealed secrets (engine/vault.py); absent in documents from before they existed."""
    value = obj.get("secrets") or ""
    if not isinstance(value, str):
        raise ExportError(f"{where}: field 'secrets' must be str")
    return value


def _attempt_times(obj: Mapping[str, Any], name: str, where: str) -> Any:
    """Failed attempts' [[started, finished, error], ...] (documents from before errors
    were kept have [started, finished]); absent in documents from before them."""
    value = obj.get(name)
    items = value if isinstance(value, list) else [None]
    if value is not None and not all(
        isinstance(p, list) and len(p) in (2, 3) and all(isinstance(t, str) for t in p)
        for p in items
    ):
        raise ExportError(
            f"{where}: field {name!r} must be a list of [started, finished] or "
            "[started, finished, error]"
        )
    return value


def _step_record(step: Mapping[str, Any], run: Run) -> Step:
    return Step(
        run=run,
        position=step["position"],
        step_id=step["step_id"],
        kind=step["kind"],
        name=step["name"],
        tool=step.get("tool", ""),
        fingerprint=step.get("fingerprint", ""),
        input=step.get("input"),
        result=step.get("result"),
        error=step.get("error"),
        secrets=_secrets(step, "step"),
        attempts=int(step.get("attempts") or 1),
        attempt_times=_attempt_times(step, "attempt_times", "step"),
        started_at=_time(step, "started_at", "step"),
        finished_at=_time(step, "finished_at", "step"),
        schema_version=int(step.get("schema_version") or 0),
        fan_out=_fan_out(step),
    )


def _fan_out(step: Mapping[str, Any]) -> int | None:
    """A branch's fan-out: a position at or before its own (absent before fan-outs)."""
    value = step.get("fan_out")
    if value is None:
        return None
    position = step["position"]
    if type(value) is not int or not 0 <= value <= position:
        raise ExportError(f"step {position}: 'fan_out' must be a position up to its own")
    return value


def _effect_record(effect: Mapping[str, Any], run: Run) -> Effect:
    return Effect(
        run=run,
        position=effect["position"],
        idempotency_key=effect["idempotency_key"],
        tool=effect["tool"],
        tool_kind=effect["tool_kind"],
        fingerprint=effect["fingerprint"],
        args=effect.get("args"),
        state=effect["state"],
        result=effect.get("result"),
        error=effect.get("error"),
        secrets=_secrets(effect, "effect"),
        attempts=int(effect.get("attempts") or 1),
        started_at=_time(effect, "started_at", "effect"),
        finished_at=_time(effect, "finished_at", "effect", required=False),
        resolution=effect.get("resolution") or "",
        note=effect.get("note") or "",
        resolved_at=_time(effect, "resolved_at", "effect", required=False),
    )


def _approval_record(approval: Mapping[str, Any], run: Run) -> Approval:
    # The decider is kept by name: user ids mean nothing in another database.
    fields = {k: approval[k] for k in _APPROVAL_FIELDS if k in approval}
    fields["secrets"] = _secrets(approval, "approval")
    return Approval(
        run=run,
        **fields,
        decided_at=_time(approval, "decided_at", "approval", required=False),
        expires_at=_time(approval, "expires_at", "approval", required=False),
    )


def history_from_export(doc: Mapping[str, Any]) -> tuple[Run, dict[int, Step]]:
    """Unsaved run and step rows from a document, for a replay that writes nothing."""
    doc = validate(doc)
    run = _run_record(doc["run"])
    steps = {s["position"]: _step_record(s, run) for s in doc["steps"]}
    return run, dict(sorted(steps.items()))


# A run imported in one of these states would be executed by this database's workers
# at once; it waits instead (no wake-up time), until an operator resumes it on purpose.
# (An imported parent waiting for child runs has none here: the sweeper would wake it.)
_HELD_ON_IMPORT = (Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING_CHILD)
_UNFINISHED = (
    *_HELD_ON_IMPORT,
    Run.Status.WAITING,
    Run.Status.AWAITING_APPROVAL,
    Run.Status.ESCALATED,
)
_SEALED_AT_OPEN = ("payload", "guards")  # an approval's secrets before anyone decided


def import_run(doc: Any, *, user: Any = None, digest: str = "", via: str = "") -> tuple[Run, bool]:
    """Create the run, its steps and effects from a document. Returns (run, created).

    The document is untrusted (invariant 15): effect keys must be the run's own, and
    an unfinished run takes no decision from it: its approvals are asked again
    (pending, no deadline), its recorded approval steps are dropped, and it waits
    for a person. The import is audited as `user`, with the file's `digest`.
    Idempotent on the run id: importing the same run again changes nothing; a
    different run under an existing id is refused."""
    doc = validate(doc)
    run = _run_record(doc["run"])
    existing = Run.objects.filter(pk=run.id).first()
    if existing is not None:
        return _same_import(existing, run), False
    steps = [_step_record(s, run) for s in doc["steps"]]
    effects = [_effect_record(e, run) for e in doc.get("effects", [])]
    approvals = [_approval_record(a, run) for a in doc.get("approvals", [])]
    imported_status = run.status
    if run.status in _UNFINISHED:
        steps = [s for s in steps if s.kind != Step.Kind.APPROVAL]
        for approval in approvals:
            _reask(approval)
        for effect in effects:
            _unresolve(effect)
        if run.status in _HELD_ON_IMPORT or (
            run.status == Run.Status.AWAITING_APPROVAL and not approvals
        ):
            run.status = Run.Status.WAITING
    try:
        with transaction.atomic():
            run.save(force_insert=True)
            _keep_origin(run, doc["run"])
            Step.objects.bulk_create(steps)
            Effect.objects.bulk_create(effects)
            _create_approvals(approvals, doc.get("approvals", []))
            audit.record(
                user,
                "run.import",
                run,
                after={
                    "sha256": digest,
                    "via": via,
                    "status": {"imported": imported_status, "stored": run.status},
                    "steps": len(steps),
                    "effects": len(effects),
                    "approvals_asked_again": len(approvals)
                    if imported_status in _UNFINISHED
                    else 0,
                },
            )
    except IntegrityError as exc:
        existing = Run.objects.filter(pk=run.id).first()
        if existing is not None:  # imported concurrently by someone else
            return _same_import(existing, run), False
        raise ExportError(f"cannot import run {run.id}: {exc}") from None
    return run, True


def _reask(approval: Approval) -> None:
    """An imported approval as a new question: whoever decided it elsewhere is not a
    decision here, and an imported deadline would let its on-expiry default decide."""
    approval.state = Approval.State.PENDING
    approval.decision = ""
    approval.decider_name = ""
    approval.comment = ""
    approval.edited_payload = None
    approval.decided_at = None
    approval.expires_at = None
    if approval.secrets:
        try:
            kept = {k: v for k, v in vault.unseal(approval.secrets).items() if k in _SEALED_AT_OPEN}
        except vault.SecretsUnavailable:
            kept = {}
        approval.secrets = vault.seal(kept) if kept else ""


def _unresolve(effect: Effect) -> None:
    """An escalation resolved elsewhere is a person's decision too: ask an operator
    again (the engine escalates an `unknown` effect when the run resumes)."""
    if effect.state == Effect.State.RESOLVED:
        effect.state = Effect.State.UNKNOWN
        effect.resolution = ""
        effect.resolved_at = None
        effect.note = ""


def _create_approvals(approvals: list[Approval], exported: list[Mapping[str, Any]]) -> None:
    for approval, source in zip(Approval.objects.bulk_create(approvals), exported, strict=True):
        if created := _time(source, "created_at", "approval", required=False):
            Approval.objects.filter(pk=approval.pk).update(created_at=created)


def _keep_origin(run: Run, exported: Mapping[str, Any]) -> None:
    """Keep when the run was created, and its parent when that run is here too."""
    fields: dict[str, Any] = {}
    if created := _time(exported, "created_at", "run", required=False):
        fields["created_at"] = created
    parent = exported.get("parent")
    if isinstance(parent, str) and Run.objects.filter(pk=parent).exists():
        fields["parent_id"] = parent
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
        run.refresh_from_db()


def _same_import(existing: Run, run: Run) -> Run:
    if (existing.agent, existing.agent_version) != (run.agent, run.agent_version) or (
        fingerprint(existing.input) != fingerprint(run.input)
    ):
        raise ExportError(
            f"a different run {run.id} already exists here (another agent, version or input)"
        )
    return existing
