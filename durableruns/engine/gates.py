"""Approval gates: the engine's side of `run.approval(...)`.

An approval is a step of kind `approval`. The first execution writes a pending
Approval row (fenced by the lease) and suspends the run without a lease or a
worker (invariant 8). A decision (a person, or expiry) wakes the run; the next
execution records the decision as the step's outcome, so every replay returns
the same decision.

A decision can land between the Approval row's insert and the run's release to
`awaiting_approval`. Both sides therefore lock the run row first: the releasing
executor sees the decision and releases to `queued` instead, or the decision
sees `awaiting_approval` and wakes the run. Either way nobody waits for a sweep.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.utils import timezone

from ..models import Approval
from ..models import Run as RunRecord
from . import doorbell, signals, store, vault
from .errors import LeaseLost, UsageError
from .keys import canonical_json
from .redaction import REDACTED, redact_text

log = logging.getLogger(__name__)

DECISIONS = ("approve", "reject", "edit")  # the default an agent allows
# Opt-in: a reviewer answers the agent in words instead of deciding ("respond"), or
# dismisses the request without deciding ("ignore": the agent is told, nothing approved).
KNOWN_DECISIONS = (*DECISIONS, "respond", "ignore")
ON_EXPIRY = ("approve", "reject")


@dataclass(frozen=True)
class Decision:
    """What agent code gets back from `run.approval(...)`."""

    decision: str  # "approve", "reject", "edit", "respond", "ignore" or "expire"
    approved: bool
    payload: Any  # the payload as approved: the reviewer's edit, if there was one
    comment: str  # for "respond": the reviewer's answer to the agent
    decider: str  # a username, or "system" for expiry
    decided_at: str

    @property
    def responded(self) -> bool:
        return self.decision == Approval.Decision.RESPOND

    @property
    def ignored(self) -> bool:
        return self.decision == Approval.Decision.IGNORE

    @property
    def expired(self) -> bool:
        return self.decision == Approval.Decision.EXPIRE

    @classmethod
    def from_outcome(cls, outcome: dict[str, Any]) -> Decision:
        fields: dict[str, Any] = {name: outcome.get(name) for name in cls.__dataclass_fields__}
        return cls(**fields)


@dataclass(frozen=True)
class Gate:
    """An approval request as agent code made it, checked and ready to store."""

    summary: str
    payload: Any
    allowed: tuple[str, ...]
    expires_in: float | None
    on_expiry: str
    schema: dict[str, Any] | None
    guards: Any
    four_eyes: bool

    @classmethod
    def build(
        cls,
        *,
        summary: str,
        payload: Any,
        allowed: Any,
        expires_in: Any,
        on_expiry: str,
        schema: Any,
        guards: Any,
        four_eyes: bool,
    ) -> Gate:
        allowed = tuple(allowed)
        unknown = set(allowed) - set(KNOWN_DECISIONS)
        if not allowed or unknown:
            raise UsageError(
                f"approval allowed decisions must be among {KNOWN_DECISIONS}, "
                f"not {sorted(unknown) or 'none'}"
            )
        if on_expiry not in ON_EXPIRY:
            raise UsageError(f"approval on_expiry must be one of {ON_EXPIRY}, not {on_expiry!r}")
        if isinstance(expires_in, timedelta):
            expires_in = expires_in.total_seconds()
        if expires_in is not None and float(expires_in) <= 0:
            raise UsageError("approval expires_in must be positive")
        if schema is not None and not isinstance(schema, dict):
            raise UsageError("approval schema must be a JSON Schema object")
        gate = cls(
            str(summary),
            payload,
            allowed,
            None if expires_in is None else float(expires_in),
            on_expiry,
            schema,
            guards,
            bool(four_eyes),
        )
        canonical_json(gate.described())  # fail before anything is stored
        return gate

    def described(self) -> dict[str, Any]:
        """The step's input: what identifies this request on replay."""
        return {
            "summary": self.summary,
            "payload": self.payload,
            "allowed": list(self.allowed),
            "expires_in": self.expires_in,
            "on_expiry": self.on_expiry,
            "schema": self.schema,
            "guards": self.guards,
            "four_eyes": self.four_eyes,
        }


def _holds(lease: store.Lease) -> bool:
    """Lock the run row if this executor still holds it (see the module docstring)."""
    held = (
        RunRecord.objects.select_for_update()
        .filter(pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner)
        .values_list("pk", flat=True)
    )
    return bool(list(held))


def open_approval(lease: store.Lease, position: int, name: str, gate: Gate) -> Approval:
    """Write the pending Approval row, fenced by the lease; reviewers are told on commit."""
    expires_at = None
    if gate.expires_in is not None:
        expires_at = timezone.now() + timedelta(seconds=gate.expires_in)
    views, secrets = store.seal_fields(payload=gate.payload, guards=gate.guards)
    try:
        with transaction.atomic():
            if not _holds(lease):
                lease.lost = True
                raise LeaseLost(f"run {lease.run_id}: fence {lease.fence} is stale")
            approval = Approval.objects.create(
                run_id=lease.run_id,
                position=position,
                name=name,
                summary=redact_text(gate.summary),  # shown, never replayed: destroyed
                payload=_view(views["payload"]),
                allowed=list(gate.allowed),
                schema=gate.schema,
                guards=_view(views["guards"]),
                secrets=secrets,
                four_eyes=gate.four_eyes,
                expires_at=expires_at,
                on_expiry=gate.on_expiry,
            )
            transaction.on_commit(lambda: _notify(approval.pk))
    except IntegrityError:
        lease.lost = True
        raise LeaseLost(f"run {lease.run_id}: approval {position} already opened") from None
    return approval


def reopen_approval(lease: store.Lease, approval: Approval, gate: Gate) -> None:
    """A resumed run asks again at an approval its cancel closed (nobody decided it)."""
    expires_at = None
    if gate.expires_in is not None:
        expires_at = timezone.now() + timedelta(seconds=gate.expires_in)
    with transaction.atomic():
        if not _holds(lease):
            lease.lost = True
            raise LeaseLost(f"run {lease.run_id}: fence {lease.fence} is stale")
        reopened = Approval.objects.filter(pk=approval.pk, state=Approval.State.CLOSED).update(
            state=Approval.State.PENDING, decided_at=None, comment="", expires_at=expires_at
        )
        if reopened:
            transaction.on_commit(lambda: _notify(approval.pk))


def _view(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def unseal_decided(approval: Approval) -> Approval:
    """The decided approval as agent code must see it: the payload it asked about, and
    an edit with every leaf the reviewer left as "[REDACTED]" given its original back
    (a reviewer edits the view; a secret they never saw is not theirs to change)."""
    shown = approval.payload
    vault.unseal_into(approval)
    if approval.edited_payload is not None:
        approval.edited_payload = unredacted(approval.edited_payload, shown, approval.payload)
    return approval


def unredacted(edited: Any, shown: Any, original: Any) -> Any:
    """`edited` (a person's edit of the redacted view `shown`) with every leaf they left
    as "[REDACTED]" given its `original` back."""
    if edited == REDACTED and shown == REDACTED:
        return original
    if isinstance(edited, dict) and isinstance(shown, dict) and isinstance(original, dict):
        return {
            key: unredacted(value, shown.get(key), original.get(key))
            if key in shown and key in original
            else value
            for key, value in edited.items()
        }
    lists = isinstance(edited, list) and isinstance(shown, list) and isinstance(original, list)
    if lists and len(edited) == len(shown) == len(original):
        return [unredacted(*items) for items in zip(edited, shown, original, strict=True)]
    return edited


def _notify(approval_pk: int) -> None:
    # Trouble in a receiver (mail) must never stop a run: the inbox shows the approval anyway.
    try:
        approval = Approval.objects.select_related("run").get(pk=approval_pk)
        replies = signals.approval_opened.send_robust(sender=Approval, approval=approval)
    except Exception:
        log.warning("approval %s: receivers not told", approval_pk, exc_info=True)
        return
    for receiver, reply in replies:
        if isinstance(reply, Exception):
            log.warning(
                "approval %s: %s failed", approval_pk, receiver.__qualname__, exc_info=reply
            )


def release_awaiting(lease: store.Lease, position: int, **fields: Any) -> str | None:
    """Release to `awaiting_approval`, or to `queued` if the approval was already decided.

    Returns the status left, or None when the lease was lost.
    """
    with transaction.atomic():
        if not _holds(lease):
            lease.lost = True
            log.warning("run %s: lease lost before suspending for approval", lease.run_id)
            return None
        pending = Approval.objects.filter(
            run_id=lease.run_id, position=position, state=Approval.State.PENDING
        ).exists()
        if pending:
            store.release(lease, RunRecord.Status.AWAITING_APPROVAL, **fields)
            return RunRecord.Status.AWAITING_APPROVAL
        store.release(lease, RunRecord.Status.QUEUED, rang_at=Now(), **fields)
        doorbell.ring(lease.run_id)
        return RunRecord.Status.QUEUED


def wake(run_id: str) -> bool:
    """After a decision: awaiting_approval -> queued, and ring at once (after commit)."""
    woken = RunRecord.objects.filter(pk=run_id, status=RunRecord.Status.AWAITING_APPROVAL).update(
        status=RunRecord.Status.QUEUED, rang_at=Now(), updated_at=Now()
    )
    if woken:
        doorbell.ring(run_id)
    return bool(woken)


def lock_run(run_id: str) -> None:
    """Deciders take the run row lock before the approval row (one lock order for all)."""
    list(RunRecord.objects.select_for_update().filter(pk=run_id).values_list("pk", flat=True))


def outcome_of(approval: Approval) -> dict[str, Any]:
    """The step outcome for a decided approval (what `Decision` is rebuilt from)."""
    approved = approval.state == Approval.State.APPROVED or (
        approval.state == Approval.State.EXPIRED and approval.on_expiry == "approve"
    )
    decided_at: datetime | None = approval.decided_at
    return {
        "decision": approval.decision,
        "approved": approved,
        "payload": approval.final_payload,
        "comment": approval.comment,
        "decider": approval.decider_name or "system",
        "decided_at": decided_at.isoformat() if decided_at else None,
    }
