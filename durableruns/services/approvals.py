"""Deciding approvals: by a person (`decide`) or by the clock (`expire_due`).

Every decision is one conditional update on `state = 'pending'`, so a double
click or two reviewers at once yield exactly one decision; the loser gets
`AlreadyDecided` saying who decided and when, and nothing changes. The audit
event and the run's wake-up commit in the same transaction as the decision.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import jsonschema
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.dispatch import receiver
from django.urls import reverse

from .. import roles
from ..engine import gates, signals, store
from ..engine.errors import SerializationError
from ..models import Approval, Run
from . import audit

log = logging.getLogger(__name__)
State = Approval.State
DECISIONS = gates.DECISIONS


class DecisionRefused(Exception):
    """The decision was not taken; `str()` says why, in words for the reviewer."""


class AlreadyDecided(DecisionRefused):
    def __init__(self, approval: Approval) -> None:
        self.approval = approval
        self.decider = approval.decider_name or "system"
        self.decided_at = approval.decided_at
        when = self.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") if self.decided_at else "?"
        super().__init__(f"already {approval.state} by {self.decider} at {when}")


class InvalidEdit(DecisionRefused):
    """The edited payload is not a JSON object, or does not match the agent's schema."""


class FourEyesRefused(DecisionRefused):
    """The person who started the run may not approve it."""


def decide(
    approval: Approval, decision: str, *, user: Any, comment: str = "", payload: Any = None
) -> Approval:
    """Approve, reject or edit-and-approve a pending approval; returns it as decided.

    `payload` (for "edit") may be a dict or JSON text. Raises `AlreadyDecided`,
    `InvalidEdit`, `FourEyesRefused` or `DecisionRefused`.
    """
    if decision not in DECISIONS:
        raise DecisionRefused(f"unknown decision {decision!r}; use one of {DECISIONS}")
    if decision not in approval.allowed:
        raise DecisionRefused(f"this approval does not allow {decision!r}")
    if not approval.is_pending:
        raise AlreadyDecided(approval)
    edited = validated_edit(approval, payload) if decision == "edit" else None
    if approval.four_eyes and decision != "reject" and _started_by(approval, user):
        raise FourEyesRefused("you started this run; another reviewer must approve it")
    state = State.REJECTED if decision == "reject" else State.APPROVED
    changes = {
        "state": state,
        "decision": decision,
        "decided_by": user,
        "decider_name": user.get_username(),
        "comment": comment.strip(),
        "edited_payload": edited,
    }
    return _settle(approval, user, changes)


def _started_by(approval: Approval, user: Any) -> bool:
    created_by = approval.run.created_by_id
    return created_by is not None and created_by == user.pk


def validated_edit(approval: Approval, payload: Any) -> Any:
    """The edit as it will be stored: a JSON object, matching the schema if there is one."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise InvalidEdit(f"the edited payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidEdit("the edited payload must be a JSON object")
    try:
        store.encode(payload)
    except SerializationError as exc:
        raise InvalidEdit(f"the edited payload cannot be stored: {exc}") from None
    if approval.schema is not None:
        try:
            jsonschema.validate(payload, approval.schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "payload"
            raise InvalidEdit(f"the edited payload does not fit: {where}: {exc.message}") from None
    return store.normalise(store.redact(payload))


def _settle(approval: Approval, actor: Any, changes: dict[str, Any]) -> Approval:
    with transaction.atomic():
        gates.lock_run(approval.run_id)
        updated = Approval.objects.filter(pk=approval.pk, state=State.PENDING).update(
            **changes, decided_at=Now()
        )
        current = Approval.objects.select_related("run").get(pk=approval.pk)
        if not updated:
            raise AlreadyDecided(current)
        audit.record(
            actor,
            f"approval.{current.decision}",
            current,
            before={"state": State.PENDING, "payload": current.payload},
            after={
                "state": current.state,
                "decision": current.decision,
                "comment": current.comment,
                "payload": current.final_payload,
            },
        )
        if current.run.kind == Run.Kind.LANGGRAPH:
            _resume_langgraph(current)
        else:
            gates.wake(current.run_id)
    return current


def _resume_langgraph(approval: Approval) -> None:
    # Once every interrupt of the thread is decided, a worker resumes the graph.
    from ..langgraph.resume import schedule

    schedule(approval.run_id)


def expire_due(batch: int = 100) -> int:
    """Apply the on-expiry default to pending approvals past their deadline.

    Recorded as expiry by "system", never as a person's rejection. Safe to run
    from several sweepers at once: each approval is settled by one of them.
    """
    due = Approval.objects.filter(state=State.PENDING, expires_at__lte=Now()).order_by(
        "expires_at"
    )[:batch]
    expired = 0
    for approval in list(due):
        changes = {
            "state": State.EXPIRED,
            "decision": Approval.Decision.EXPIRE,
            "decider_name": "system",
            "comment": f"expired; on-expiry default applied: {approval.on_expiry}",
        }
        try:
            _settle(approval, None, changes)
        except AlreadyDecided:
            continue
        expired += 1
    return expired


def pending() -> Any:
    """Pending approvals of runs still waiting, oldest first (the inbox)."""
    return (
        Approval.objects.filter(state=State.PENDING)
        .exclude(run__status__in=list(Run.TERMINAL))
        .select_related("run")
        .order_by("created_at", "pk")
    )


def reviewers() -> Any:
    """Active users who may decide approvals and have an email address."""
    app_label, codename = roles.DECIDE_APPROVALS.split(".", 1)
    perm = Q(
        groups__permissions__codename=codename,
        groups__permissions__content_type__app_label=app_label,
    )
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .exclude(email="")
        .filter(perm | Q(is_superuser=True))
        .distinct()
    )


def approval_link(approval: Approval) -> str:
    return settings.DURABLERUNS_BASE_URL.rstrip("/") + reverse("approval", args=[approval.pk])


def notify_reviewers(approval: Approval) -> int:
    """Email every reviewer that an approval is waiting, with an absolute link to it."""
    recipients = sorted(reviewers().values_list("email", flat=True))
    if not recipients:
        return 0
    run = approval.run
    lines = [
        f"Run {run.id} ({run.agent}) is waiting for your decision on {approval.name!r}.",
        "",
        approval.summary,
        "",
        f"Review it here: {approval_link(approval)}",
    ]
    if approval.expires_at:
        lines.append(
            f"It expires at {approval.expires_at:%Y-%m-%d %H:%M UTC} (then: {approval.on_expiry})."
        )
    subject = f"Approval needed: {approval.name} ({run.agent})"
    return send_mail(subject, "\n".join(lines), None, recipients)


@receiver(signals.approval_opened, dispatch_uid="durableruns.notify_reviewers")
def _mail_reviewers(sender: Any, approval: Approval, **kwargs: Any) -> None:
    notify_reviewers(approval)
