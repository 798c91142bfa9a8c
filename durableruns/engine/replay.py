"""Dry replay, fork preview and fork (ARCHITECTURE.md section 6).

A dry replay runs agent code through the engine's own Run context, so the same
history lookup and the same divergence check (invariant 9) decide each position;
the only difference is that a new step is never executed: the replay stops where
agent code would do new work. It writes nothing to the database and calls no tool
and no model, so it is safe on a production run, and it works on an exported
document as well as on a stored run.

A fork is a new run (new id, so new idempotency keys) whose history before the fork
position is a copy of the parent's steps; the executor replays those and executes
the rest. Effect rows are not copied: their keys belong to the parent.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from ..models import Effect, Step
from ..models import Run as RunRecord
from . import doorbell, gates, registry, store, vault
from .context import Recorded, Run, StepRequest
from .errors import (
    NonDeterminismError,
    SecretsUnavailable,
    Suspend,
    UnknownAgent,
    UsageError,
)
from .outcomes import describe

REPLAYED, DIVERGED, WOULD_EXECUTE = "replayed", "diverged", "would_execute"


@dataclass
class ReplayEntry:
    """What happened at one position of a dry replay."""

    position: int
    status: str  # REPLAYED, DIVERGED or WOULD_EXECUTE
    kind: str
    name: str
    tool: str = ""
    expected: str = ""  # the recorded step, described as the engine's errors describe it
    actual: str = ""  # what agent code asked for now
    outcome: str = ""  # for a replayed step: "result" or "error"
    message: str = ""


@dataclass
class ReplayReport:
    run_id: str
    agent: str
    agent_version: str
    recorded_steps: int
    entries: list[ReplayEntry] = field(default_factory=list)
    # How agent code ended: "returned", "raised", "would_execute", "suspended",
    # "diverged", or "not_replayed" (agent version not registered here).
    ending: str = ""
    result: Any = None
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.ending not in ("diverged", "not_replayed")

    @property
    def divergence(self) -> ReplayEntry | None:
        return next((e for e in self.entries if e.status == DIVERGED), None)

    @property
    def replayed(self) -> int:
        return sum(1 for e in self.entries if e.status == REPLAYED)

    def lines(self) -> list[str]:
        """The report as text, one line per position (the replay command prints this)."""
        out = [
            f"dry replay of run {self.run_id} ({self.agent}@{self.agent_version}), "
            f"{self.recorded_steps} recorded steps"
        ]
        for entry in self.entries:
            out.append(_entry_line(entry))
        out.append(self.summary())
        return out

    def summary(self) -> str:
        if self.ending == "diverged":
            entry = self.divergence
            where = f"step {entry.position}" if entry else "the end of history"
            return f"DIVERGED at {where}: {self.error['message'] if self.error else ''}"
        if self.ending == "not_replayed":
            return f"NOT REPLAYED: {self.error['message'] if self.error else ''}"
        texts = {
            "returned": "agent code returned",
            "raised": f"agent code raised {self.error and self.error.get('type')}",
            "would_execute": "agent code would execute a new step here",
            "suspended": f"the run would wait here ({self.error and self.error.get('message')})",
        }
        return f"OK: {self.replayed} steps replayed; {texts.get(self.ending, self.ending)}"


def _entry_line(entry: ReplayEntry) -> str:
    label = f"  #{entry.position:<3} {entry.status:<13} {entry.kind} {entry.name!r}"
    if entry.status == DIVERGED:
        return f"{label}\n        expected: {entry.expected}\n        actual:   {entry.actual}"
    if entry.status == REPLAYED and entry.outcome == "error":
        return f"{label} (recorded error: {entry.message})"
    return label


class _WouldExecute(BaseException):
    """Agent code asked for a step beyond the history: a dry replay stops here."""


class _ForbiddenLease(store.Lease):
    """A lease that is never held: any path that would write or call out stops."""

    def ensure_held(self) -> None:
        raise _WouldExecute("a dry replay executes nothing")


class DryRun(Run):
    """The engine's Run context, reporting each position instead of executing new steps."""

    def __init__(
        self, record: RunRecord, history: Mapping[int, Step], report: ReplayReport
    ) -> None:
        lease = _ForbiddenLease(record.id, owner="dry-replay", fence=-1, ttl=0.0, lost=True)
        super().__init__(
            record,
            lease,
            history,
            {},
            max_steps=record.max_steps,
            max_duration=record.max_duration_seconds,
        )
        self.report = report

    # A fan-out's branches are replayed one by one, reported in submission order.
    executes_concurrently = False

    def _next(self, request: StepRequest) -> tuple[int, Recorded | None]:
        branch = self.branches.current()
        position = self.position if branch is None else branch.position
        try:
            position, recorded = super()._next(request)
        except NonDeterminismError as exc:
            self._diverged(position, request, exc)
            raise
        if recorded is None:
            self._add(position, WOULD_EXECUTE, request, actual=request.describe())
            raise _WouldExecute(f"step {position} is beyond the recorded history")
        error = recorded.error
        self._add(
            position,
            REPLAYED,
            request,
            expected=_recorded(recorded),
            actual=request.describe(),
            outcome="error" if error else "result",
            message=(error or {}).get("message", "") if isinstance(error, dict) else "",
        )
        return position, recorded

    def before_new_step(self, position: int) -> None:
        # Unreachable after _next() stops at new work; kept as the last guard.
        raise _WouldExecute(f"step {position} would execute")

    def finish_check(self) -> None:
        try:
            super().finish_check()
        except NonDeterminismError as exc:
            extra = self._history[self.position]
            self.report.entries.append(
                ReplayEntry(
                    position=extra.position,
                    status=DIVERGED,
                    kind=extra.kind,
                    name=extra.name,
                    tool=extra.tool,
                    expected=_recorded(extra),
                    actual="agent code returned (no step)",
                    message=exc.message,
                )
            )
            raise

    def _diverged(self, position: int, request: StepRequest, exc: NonDeterminismError) -> None:
        self._add(
            position,
            DIVERGED,
            request,
            expected=exc.details.get("expected", ""),
            actual=exc.details.get("actual", request.describe()),
            message=exc.message,
        )

    def _add(self, position: int, status: str, request: StepRequest, **fields: Any) -> None:
        self.report.entries.append(
            ReplayEntry(
                position=position,
                status=status,
                kind=request.kind,
                name=request.name,
                tool=request.tool,
                **fields,
            )
        )


def _recorded(step: Recorded) -> str:
    return StepRequest(step.kind, step.name, step.tool, step.fingerprint).describe()


_RECORDED = object()  # dry_replay's default input: the run's own


def dry_replay(
    record: RunRecord, history: Mapping[int, Step] | None = None, *, run_input: Any = _RECORDED
) -> ReplayReport:
    """Re-execute agent code against recorded history, with every tool and model call
    forbidden. `history` defaults to the run's stored steps; an exported document
    gives its own (durableruns.services.exports.history_from_export). `run_input`
    replaces the run's input (a fork's edited input, checked before forking)."""
    if getattr(record, "redacted_at", None) is not None:
        return _not_replayed(record, history, SHREDDED)
    try:
        if history is None:
            history = store.load_history(record.id)
        else:
            history = {position: vault.unseal_into(step) for position, step in history.items()}
    except SecretsUnavailable as exc:
        return _not_replayed(record, history, exc.message)
    report = ReplayReport(
        run_id=record.id,
        agent=record.agent,
        agent_version=record.agent_version,
        recorded_steps=len(history),
    )
    try:
        agent = registry.get_agent(record.agent, record.agent_version)
    except UnknownAgent as exc:
        report.ending, report.error = "not_replayed", {"type": "UnknownAgent", "message": str(exc)}
        return report
    context = DryRun(record, history, report)
    _drive(agent, context, record, report, run_input)
    return report


def fork_dry_run(run: RunRecord, position: int, edited_input: Any) -> ReplayReport:
    """What agent code does with a fork's edited input over the steps the fork reuses
    (those before `position`): a reused step whose call now differs is where the fork
    would stop with a non-determinism error. Nothing executes."""
    history = {p: step for p, step in store.load_history(run.id).items() if p < position}
    return dry_replay(run, history, run_input=store.normalise(edited_input))


def _not_replayed(
    record: RunRecord, history: Mapping[int, Step] | None, message: str
) -> ReplayReport:
    report = ReplayReport(record.id, record.agent, record.agent_version, len(history or {}))
    report.ending = "not_replayed"
    report.error = {"type": "SecretsUnavailable", "message": message}
    return report


def _drive(
    agent: registry.Agent,
    context: DryRun,
    record: RunRecord,
    report: ReplayReport,
    run_input: Any = _RECORDED,
) -> None:
    if run_input is _RECORDED:
        run_input = store.normalise(vault.reveal(record, "input"))
    try:
        value = agent.fn(context, run_input)
        context.finish_check()
    except SecretsUnavailable as exc:
        report.ending = "not_replayed"
        report.error = {"type": "SecretsUnavailable", "message": exc.message}
    except NonDeterminismError as exc:
        report.ending = "diverged"
        report.error = {"type": "NonDeterminismError", "message": exc.message, **exc.details}
    except _WouldExecute:
        report.ending = "would_execute"
    except Suspend as suspend:
        report.ending = "suspended"
        report.error = {"type": "Suspend", "message": suspend.reason or suspend.status}
    except Exception as exc:
        report.ending, report.error = "raised", describe(exc)
    else:
        report.ending, report.result = "returned", store.normalise(value)


# --- Fork ------------------------------------------------------------------------


KEEP_OUTPUT = object()  # fork(output=...) default: the recorded outcome is kept

SHREDDED = (
    "retention redacted this run and shredded its secrets: agent code can no longer be "
    "given what it saw, so it cannot be replayed or forked"
)


class ForkError(UsageError):
    """The fork cannot be made (position out of range, agent version gone)."""


def fork_preview(run: RunRecord, position: int) -> list[Effect]:
    """The parent's effects at or after `position`: a fork would execute them again,
    with new idempotency keys (so providers will not deduplicate them)."""
    return list(run.effects.filter(position__gte=position).order_by("position", "id"))


def approvals_to_ask_again(run: RunRecord, position: int, *, sandbox: bool = False) -> list[Step]:
    """The approved approval steps before `position` that guard effects a fork from
    `position` would execute again. Copying their decision would let the fork repeat a
    guarded write (a second refund) with no reviewer; a sandbox fork calls no write tool."""
    if sandbox or not run.effects.filter(position__gte=position).exists():
        return []
    approvals = run.steps.filter(position__lt=position, kind=Step.Kind.APPROVAL)
    return [step for step in approvals.order_by("position") if _approved(step)]


def _approved(step: Step) -> bool:
    return isinstance(step.result, dict) and step.result.get("approved") is True


def fork(
    run: RunRecord,
    position: int,
    *,
    created_by: Any = None,
    sandbox: bool = False,
    ask_again: frozenset[int] = frozenset(),
    input: Any = None,
    output: Any = KEEP_OUTPUT,
) -> RunRecord:
    """A new run that reuses `run`'s recorded steps before `position` and executes from there.

    The approval steps at `ask_again` are not copied: the fork opens a fresh approval
    there and waits for a reviewer before going on. In sandbox mode the fork does not
    call write tools; it records what they would have been called with (see _EffectCall
    in engine.context). `input`, when given, replaces the parent's input (validated and
    redacted like a new run's); the steps reused before `position` are still the
    parent's. `output`, when given, replaces the recorded outcome of the last reused step
    (position - 1), so the fork goes on from an edited state. Call it inside the caller's
    transaction when the fork must commit with something else (an audit row)."""
    _check_fork(run, position)
    run_input, run_secrets = _fork_input(run, input)
    copied = [
        step
        for step in run.steps.filter(position__lt=position).order_by("position")
        if step.position not in ask_again
    ]
    if output is not KEEP_OUTPUT:
        if not copied or copied[-1].position != position - 1:
            raise ForkError("there is no reused step before the fork point whose output to edit")
        _edit_output(copied[-1], output)
    with transaction.atomic():
        child = RunRecord.objects.create(
            id=_fork_id(run.id),
            agent=run.agent,
            agent_version=run.agent_version,
            input=run_input,
            secrets=run_secrets,
            max_steps=run.max_steps,
            max_duration_seconds=run.max_duration_seconds,
            max_tokens=run.max_tokens,
            max_cost=run.max_cost,
            parent=run,
            fork_position=position,
            sandbox=sandbox,
            created_by=created_by,
            rang_at=Now(),
        )
        Step.objects.bulk_create([_copy_step(step, child) for step in copied])
        doorbell.ring(child.id)
    return child


def fork_output(value: Any) -> Any:
    """An edited step output for a fork, as it would be stored (redacted, size-checked)."""
    try:
        store.encode(value)
    except UsageError as exc:
        raise ForkError(f"the edited output cannot be stored: {exc}") from None
    return store.redacted(value)


def fork_input(value: Any) -> Any:
    """An edited input for a fork, as it would be stored: a JSON object within the
    payload limits, secrets redacted. Raises ForkError otherwise."""
    if not isinstance(value, dict):
        raise ForkError(f"a fork's input must be a JSON object, not {type(value).__name__}")
    try:
        store.encode(value)
    except UsageError as exc:
        raise ForkError(f"the edited input cannot be stored: {exc}") from None
    return store.redacted(value)


def _fork_input(run: RunRecord, edited: Any) -> tuple[Any, str]:
    """The fork's (input view, sealed secrets). An operator edits the redacted view, so a
    leaf left as "[REDACTED]" gets the parent's original back; new secrets are sealed."""
    if edited is None:
        return run.input, run.secrets
    fork_input(edited)
    full = gates.unredacted(edited, run.input, vault.reveal(run, "input"))
    return store.stored("input", full)


def _edit_output(step: Step, output: Any) -> None:
    """Replace a copied step's outcome, sealing what redaction matches in the new one."""
    fork_output(output)
    originals = vault.unseal(step.secrets)
    full = gates.unredacted(output, step.result, originals.get("result", step.result))
    originals.pop("result", None)
    originals.pop("error", None)
    view, sealed = store.stored("result", full)
    originals.update(vault.unseal(sealed))
    step.result, step.error, step.secrets = view, None, vault.seal(originals)


def _check_fork(run: RunRecord, position: int) -> None:
    if run.redacted_at is not None:
        raise ForkError(f"cannot fork: {SHREDDED}")
    recorded = run.steps.count()
    if (
        not isinstance(position, int)
        or isinstance(position, bool)
        or not (0 <= position <= recorded)
    ):
        raise ForkError(f"fork position must be between 0 and {recorded} (the recorded steps)")
    try:
        registry.get_agent(run.agent, run.agent_version)
    except UnknownAgent as exc:
        raise ForkError(f"cannot fork: {exc}") from None


def _fork_id(parent_id: str) -> str:
    return f"{parent_id[:40]}-fork-{uuid.uuid4().hex[:12]}"


def _copy_step(step: Step, child: RunRecord) -> Step:
    return Step(
        run=child,
        position=step.position,
        step_id=step.step_id,
        kind=step.kind,
        name=step.name,
        tool=step.tool,
        fingerprint=step.fingerprint,
        input=step.input,
        result=step.result,
        error=step.error,
        secrets=step.secrets,
        attempts=step.attempts,
        attempt_times=step.attempt_times,
        started_at=step.started_at,
        finished_at=step.finished_at,
        schema_version=step.schema_version,
        fan_out=step.fan_out,
    )


__all__ = [
    "DIVERGED",
    "KEEP_OUTPUT",
    "REPLAYED",
    "WOULD_EXECUTE",
    "DryRun",
    "ForkError",
    "ReplayEntry",
    "ReplayReport",
    "approvals_to_ask_again",
    "dry_replay",
    "fork",
    "fork_input",
    "fork_output",
    "fork_preview",
]
