"""Operator actions on a run: cancel, resume, fork, dry replay.

Each state change is a conditional update, so repeating it is harmless, and each is
audited in the same transaction as the change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now

from .. import roles
from ..engine import children, doorbell, replay, store
from ..engine.runs import start_run
from ..models import Approval, Effect, Run, Step
from . import audit
from .exports import history_from_export

Status = Run.Status
RESUMABLE = (Status.FAILED, Status.CANCELLED, Status.WAITING)
REASON_MAX = 500


class ReasonRequired(ValueError):
    """A person cancelling a run (on its page, in bulk, through the API) says why."""


def person_reason(text: Any) -> str:
    """The reason a person gave, checked the same way everywhere it is asked for."""
    reason = str(text or "").strip()
    if not reason or len(reason) > REASON_MAX or "\x00" in reason:
        raise ReasonRequired(f"give a reason (1 to {REASON_MAX} characters); it is audited")
    return reason


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


def cancel(run: Run, *, user: Any, reason: str = "") -> bool:
    """Stop a run that has not finished, and its unfinished child runs with it (at every
    depth, each audited). Bumping the fence makes a worker that is executing it now
    fail its next write, so it stops before its next effect. A cancelled child run's
    parent is woken: its step fails with dr.ChildRunCancelled."""
    with transaction.atomic():
        if run.parent_run_id:
            # Parent before child, as cancelling the parent locks them: a cancel of each
            # at once otherwise waited for the other in a cycle (Postgres aborted one).
            list(Run.objects.select_for_update().filter(pk=run.parent_run_id).values("pk"))
        changed = _cancel_one(run, user, reason)
        if changed:
            _cancel_descendants(run, user)
            children.wake_parent(run.parent_run_id)
    return changed


def cancel_orphans(batch: int = 500) -> int:
    """The sweeper's part of the cascade (Temporal's default parent-close policy): cancel
    each unfinished child whose parent ended without recording its outcome (e.g. a parent
    requeued after a crash that then diverged and failed), as the system, audited.
    A child whose outcome the parent recorded (a failed child an operator resumed since)
    is someone's deliberate work, and is left alone. Returns how many were cancelled."""
    recorded = Step.objects.filter(
        run_id=OuterRef("parent_run_id"), position=OuterRef("parent_position")
    )
    orphans = list(
        Run.objects.filter(parent_run__isnull=False, parent_run__status__in=Run.TERMINAL)
        .exclude(status__in=Run.TERMINAL)
        .exclude(Exists(recorded))
        .select_related("parent_run")
        .order_by("pk")[:batch]
    )
    cancelled = 0
    for child in orphans:
        parent = child.parent_run
        reason = f"its parent run {parent.pk} ended ({parent.status})"
        with transaction.atomic():
            if _cancel_one(child, None, reason):
                _cancel_descendants(child, None)
                cancelled += 1
    return cancelled


def _cancel_one(run: Run, user: Any, reason: str) -> bool:
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
        closed = _close_pending_approvals(run, user)
        audit.record(
            user,
            "run.cancel",
            run,
            before={"status": run.status},
            after=_with_reason({"status": Status.CANCELLED, "closed_approvals": closed}, reason),
        )
    return bool(changed)


def _cancel_descendants(run: Run, user: Any) -> None:
    """Parent before child, level by level (child ids derive from their parent's, so
    the links never loop)."""
    level = [run.pk]
    while level:
        found = list(Run.objects.filter(parent_run_id__in=level).order_by("pk"))
        for child in found:
            if not child.is_terminal:
                _cancel_one(child, user, f"cancelled with its parent run {child.parent_run_id}")
        level = [child.pk for child in found]


def _close_pending_approvals(run: Run, user: Any) -> list[int]:
    """Take the cancelled run's approvals out of reviewers' queues: `closed`, with no
    decision and no decider, so nobody reads it as a reviewer's answer."""
    pending = Approval.objects.filter(run_id=run.pk, state=Approval.State.PENDING)
    closed = list(pending.order_by("pk").values_list("pk", flat=True))
    who = user.get_username() if getattr(user, "is_authenticated", False) else "the system"
    pending.update(
        state=Approval.State.CLOSED,
        decided_at=Now(),
        comment=f"Closed: the run was cancelled by {who}.",
    )
    return closed


REDACTED = (
    "retention redacted this run: its input and step outcomes are gone, so agent code "
    "cannot be given what it saw and the run cannot be resumed (nor replayed or forked)"
)


def is_resumable(status: str, effect_states: Iterable[str], *, redacted: bool) -> bool:
    """The rule: failed, cancelled or waiting runs, and escalated ones with no unknown
    effect left (resolved, but not woken: e.g. resolved by a version before this check
    existed); never a run retention redacted (see REDACTED). `resumable()` states the
    same rule in SQL (tests/web/test_resumable_rule.py holds them together)."""
    if redacted:
        return False
    if status == Status.ESCALATED:
        return Effect.State.UNKNOWN not in effect_states
    return status in RESUMABLE


def resumable() -> Q:
    """`is_resumable`, as a filter on runs."""
    unknown = Effect.objects.filter(run_id=OuterRef("pk"), state=Effect.State.UNKNOWN)
    statuses = Q(status__in=RESUMABLE) | (Q(status=Status.ESCALATED) & ~Exists(unknown))
    return statuses & Q(redacted_at__isnull=True)


def not_resumed(run: Run) -> str:
    """Why `resume(run)` changed nothing, in words for the operator."""
    if run.redacted_at is not None:
        return REDACTED
    return f"run {run.id} is {run.status}; only failed, cancelled or waiting runs can be resumed"


def resume(run: Run, *, user: Any, reason: str = "") -> bool:
    """Continue a run from its last checkpoint (same keys), if it is `resumable()`."""
    with transaction.atomic():
        # A LangGraph thread is resumed by LangGraph (a reviewer's decision), never queued.
        ended = store.escalation_ended(run.pk) if run.status == Status.ESCALATED else {}
        changed = Run.objects.filter(resumable(), pk=run.pk, kind=Run.Kind.NATIVE).update(
            **ended,
            status=Status.QUEUED,
            error=None,
            finished_at=None,
            wake_at=None,
            rang_at=Now(),
            updated_at=Now(),
        )
        after = Status.QUEUED
        if not changed:
            # A thread handed back for a worker that has its graph: try again now.
            changed = Run.objects.filter(
                pk=run.pk, kind=Run.Kind.LANGGRAPH, status=Status.WAITING
            ).update(wake_at=Now(), rang_at=Now(), updated_at=Now())
            after = Status.WAITING
        if changed:
            audit.record(
                user,
                "run.resume",
                run,
                before={"status": run.status},
                after=_with_reason({"status": after}, reason),
            )
            doorbell.ring(run.pk)
    return bool(changed)


@dataclass(frozen=True)
class ForkApprovals:
    """Which of the parent's decided approvals before a fork point the fork asks again.

    The rule (ARCHITECTURE.md invariant 14): a guarded effect executes only under a
    decision recorded by someone allowed to make it, for exactly the arguments it
    guarded. So a fork never edits an approval's outcome (`edited_decision` is asked
    again instead), and a fork that edits its input or a step's output may change what
    a guarded effect receives, so every approval it copies that said yes is asked again
    (`required`). An unedited fork that executes guarded effects again asks again too,
    unless a forker who may approve reuses the decision (`reusable`); a four-eyes
    approval is never reused, since the forker starts the fork.

    A LangGraph thread's fork (services.langgraph.fork_thread) follows the same rule
    more strictly, since no ledger says which nodes a decision guards: it takes no
    edits and reuses no decision; an interrupt at the fork checkpoint is asked again,
    and a checkpoint after a decision that said yes (`said_yes`) cannot be forked."""

    required: tuple[Step, ...] = ()
    reusable: tuple[Step, ...] = ()
    edited_decision: Step | None = None

    def ask_again(self, *, reuse: bool) -> frozenset[int]:
        asked = self.required if reuse else (*self.required, *self.reusable)
        return frozenset(step.position for step in asked)


def fork_approvals(
    run: Run,
    position: int,
    *,
    sandbox: bool = False,
    edits: bool = False,
    edits_output: bool = False,
) -> ForkApprovals:
    """The approvals a fork from `position` asks again (see ForkApprovals); `edits` says
    the fork changes the input or an output, `edits_output` that it changes step
    `position - 1`'s."""
    before = list(run.steps.filter(position__lt=position, kind=Step.Kind.APPROVAL))
    before.sort(key=lambda step: step.position)
    edited = before[-1] if edits_output and before and before[-1].position == position - 1 else None
    required = [edited] if edited else []
    if edits and not sandbox:
        required += [step for step in before if step is not edited and said_yes(step.result)]
        return ForkApprovals(tuple(required), (), edited)
    guarding = replay.approvals_to_ask_again(run, position, sandbox=sandbox)
    required += [step for step in guarding if _four_eyes(step)]
    reusable = tuple(step for step in guarding if not _four_eyes(step))
    return ForkApprovals(tuple(required), reusable, edited)


def said_yes(outcome: Any) -> bool:
    """Whether a recorded approval outcome (engine.gates.outcome_of) let effects run:
    the decision a fork may not carry without asking again (native runs and LangGraph
    threads alike, services.langgraph.fork_thread)."""
    return isinstance(outcome, dict) and outcome.get("approved") is True


def _four_eyes(step: Step) -> bool:
    return isinstance(step.input, dict) and step.input.get("four_eyes") is True


def fork(
    run: Run,
    position: int,
    *,
    user: Any,
    sandbox: bool = False,
    reuse_approvals: bool = False,
    input: Any = None,
    output: Any = replay.KEEP_OUTPUT,
    reason: str = "",
) -> Run:
    """A new run reusing `run`'s steps before `position` (engine.replay.fork), audited.

    The approvals `fork_approvals` names are asked again (a fresh approval, before the
    effects they guard); `reuse_approvals` lets a forker who may approve keep the ones
    it may keep, and is refused when any must be asked again. `input` replaces the
    parent's input and `output` the last reused step's outcome (the audit keeps both
    versions, as stored); an output that would replace an approval's decision is not
    applied: that approval is asked again, and the audit keeps what was typed."""
    created_by = user if getattr(user, "is_authenticated", False) else None
    edits_output = output is not replay.KEEP_OUTPUT
    plan = fork_approvals(
        run,
        position,
        sandbox=sandbox,
        edits=input is not None or edits_output,
        edits_output=edits_output,
    )
    if reuse_approvals and plan.required:
        steps = ", ".join(f"#{step.position}" for step in plan.required)
        raise replay.ForkError(
            f"cannot reuse approvals: {steps} must be asked again (the fork edits what they "
            "decided, or they need four eyes)"
        )
    if reuse_approvals and plan.reusable and not user.has_perm(roles.DECIDE_APPROVALS):
        raise PermissionDenied(
            f"reusing the copied approvals needs {roles.DECIDE_APPROVALS}: "
            "without it the fork asks a reviewer again"
        )
    ask_again = plan.ask_again(reuse=reuse_approvals)
    refused = None
    if plan.edited_decision is not None:
        refused = {"step": position - 1, "result": replay.fork_output(output)}
        output = replay.KEEP_OUTPUT
    with transaction.atomic():
        child = replay.fork(
            run,
            position,
            created_by=created_by,
            sandbox=sandbox,
            ask_again=ask_again,
            input=input,
            output=output,
        )
        after: dict[str, Any] = {
            "fork": child.id,
            "position": position,
            "sandbox": sandbox,
            "steps_reused": child.steps.count(),
            "approvals_asked_again": sorted(ask_again),
            "approvals_reused_by_forker": [s.position for s in plan.reusable]
            if reuse_approvals
            else [],
        }
        before: dict[str, Any] = {"run": run.id, "status": run.status}
        if input is not None:
            before["input"], after["input"] = run.input, child.input
        if refused is not None:
            after["decision_edit_refused"] = refused
        if output is not replay.KEEP_OUTPUT:
            edited = child.steps.get(position=position - 1)
            parents = run.steps.get(position=position - 1)
            before["output"] = {"step": position - 1, "result": parents.result}
            before["output"]["error"] = parents.error
            after["output"] = {"step": position - 1, "result": edited.result}
        audit.record(user, "run.fork", run, before=before, after=_with_reason(after, reason))
    return child


def _with_reason(after: dict[str, Any], reason: str) -> dict[str, Any]:
    return {**after, "reason": reason} if reason else after


def dry_replay(run_or_export: Run | Mapping[str, Any]) -> replay.ReplayReport:
    """Dry-replay a stored run or an exported document (raises ExportError if invalid)."""
    if isinstance(run_or_export, Run):
        return replay.dry_replay(run_or_export)
    return replay.dry_replay(*history_from_export(run_or_export))
