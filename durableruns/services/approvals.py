"""Deciding approvals: by a person (`decide`) or by the clock (`expire_due`).

Every decision is one conditional update on `state = 'pending'`, so a double
click or two reviewers at once yield exactly one decision; the loser gets
`AlreadyDecided` saying who decided and when, and nothing changes. The audit
event and the run's wake-up commit in the same transaction as the decision.
"""

from __future__ import annotations

import contextlib
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
from ..engine.redaction import redact_text
from ..models import Approval, Run
from ..validation import InvalidInput, parse_json
from . import audit

log = logging.getLogger(__name__)
State = Approval.State
DECISIONS = gates.KNOWN_DECISIONS
REASON_MAX = 5000


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
    """The edited payload is not a JSON object, or does not match the agent's schema;
    `field` names the top-level key at fault, if one is ("" otherwise)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class FourEyesRefused(DecisionRefused):
    """The person who started the run may not approve it."""


class ApprovedSomethingElse(DecisionRefused):
    """Approve was sent with a payload that differs from the one shown."""


class ClaimedByOther(DecisionRefused):
    """Another reviewer has claimed the approval; only they (or an admin) may decide."""


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
    if decision == "approve" and payload is not None:
        _refuse_changed(approval, payload)
    comment = _reason(decision, comment)
    edited = validated_edit(approval, payload) if decision == "edit" else None
    if approval.four_eyes and decision in APPROVING and _started_by(approval, user):
        raise FourEyesRefused("you started this run; another reviewer must approve it")
    _check_claim(approval, user)
    changes = {
        "state": STATE_AFTER.get(decision, State.APPROVED),
        "decision": decision,
        "decided_by": user,
        "decider_name": user.get_username(),
        # Read by people (and handed to agent code as the reviewer's words, the same
        # on execution and replay): a secret typed here is destroyed, never stored.
        "comment": redact_text(comment),
        "edited_payload": edited,
    }
    return _settle(approval, user, changes)


def _refuse_changed(approval: Approval, payload: Any) -> None:
    """Approve approves the payload as first shown. Values sent with it that differ mean
    the reviewer changed something and pressed Approve: dropping the change would pay
    what they meant to lower, and applying it would approve an edit without the edit's
    checks and record, so neither happens and the reviewer chooses again."""
    if isinstance(payload, str):
        with contextlib.suppress(InvalidInput):  # not JSON: certainly not the payload shown
            payload = parse_json(payload, "the payload")
    if payload != approval.payload:
        raise ApprovedSomethingElse(
            "Approve approves the payload as first shown, but the values sent differ from "
            'it: choose "Edit and approve" (decision "edit") to approve them, or undo the '
            "change"
        )


APPROVING = ("approve", "edit")  # what four-eyes keeps from the run's starter
STATE_AFTER = {"reject": State.REJECTED, "respond": State.RESPONDED, "ignore": State.IGNORED}
NEEDS_WORDS = {
    "reject": "a rejection needs a reason (the agent and the audit log get it)",
    "respond": "write the answer the agent should get",
}


def _reason(decision: str, comment: Any) -> str:
    text = str(comment or "").strip()
    if decision in NEEDS_WORDS and not text:
        raise DecisionRefused(NEEDS_WORDS[decision])
    if len(text) > REASON_MAX:
        raise DecisionRefused(f"the comment is too long (at most {REASON_MAX:,} characters)")
    return text


def _check_claim(approval: Approval, user: Any) -> None:
    claimer = approval.claimed_by_id
    if claimer is None or claimer == user.pk or user.has_perm(roles.MANAGE_POLICIES):
        return
    raise ClaimedByOther(
        f"claimed by {approval.claimed_by.get_username()}; ask them or an admin to reassign it"
    )


def claim(approval: Approval, *, user: Any, assignee: Any) -> Approval:
    """Give a pending approval to `assignee` (None releases it).

    A reviewer may take an unclaimed approval or release their own; giving it to
    someone else, or taking it from them, is an admin's. Audited; repeating it
    changes nothing.
    """
    is_admin = user.has_perm(roles.MANAGE_POLICIES)
    target = assignee
    if not approval.is_pending:
        raise AlreadyDecided(approval)
    if target is not None and not target.has_perm(roles.DECIDE_APPROVALS):
        raise DecisionRefused(f"{target.get_username()} may not decide approvals")
    if not is_admin and target is not None and target.pk != user.pk:
        raise DecisionRefused("only an admin may assign an approval to someone else")
    current = approval.claimed_by_id
    if not is_admin and current not in (None, user.pk):
        raise ClaimedByOther(f"already claimed by {approval.claimed_by.get_username()}")
    new = target.pk if target is not None else None
    if current == new:
        return approval
    with transaction.atomic():
        updated = Approval.objects.filter(
            pk=approval.pk, state=State.PENDING, claimed_by_id=current
        ).update(claimed_by_id=new, claimed_at=Now() if new else None)
        fresh = Approval.objects.select_related("run", "claimed_by").get(pk=approval.pk)
        if not updated:
            raise DecisionRefused("the approval changed meanwhile; look again")
        audit.record(
            user,
            "approval.claim" if new else "approval.release",
            fresh,
            before={"claimed_by": current},
            after={"claimed_by": target.get_username() if target else None},
        )
    return fresh


def decided() -> Any:
    """Decided approvals, newest decision first (the inbox's history)."""
    rows = Approval.objects.exclude(state=State.PENDING).select_related(
        "run", "run__parent_run", "claimed_by"
    )
    return rows.order_by("-decided_at", "-pk")


def _started_by(approval: Approval, user: Any) -> bool:
    created_by = approval.run.created_by_id
    return created_by is not None and created_by == user.pk


def validated_edit(approval: Approval, payload: Any) -> Any:
    """The edit as it will be stored: a JSON object, matching the schema if there is one."""
    if isinstance(payload, str):
        try:
            payload = parse_json(payload, "the edited payload")
        except InvalidInput as exc:
            raise InvalidEdit(str(exc)) from None
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
            limits = describe_limits(exc.schema) if isinstance(exc.schema, dict) else ""
            allowed = f" (allowed: {limits})" if limits else ""
            raise InvalidEdit(
                f"the edited payload does not fit: {where}: {exc.message}{allowed}",
                field=str(exc.absolute_path[0]) if exc.absolute_path else "",
            ) from None
    return store.normalise(store.redact(payload))


def describe_limits(spec: dict[str, Any]) -> str:
    """A schema's limits in words, e.g. "at least 1, at most 25,000"."""
    parts = []
    for key, words in (
        ("minimum", "at least"),
        ("maximum", "at most"),
        ("exclusiveMinimum", "more than"),
        ("exclusiveMaximum", "less than"),
    ):
        if isinstance(spec.get(key), int | float) and not isinstance(spec.get(key), bool):
            parts.append(f"{words} {spec[key]:,}")
    if isinstance(spec.get("maxLength"), int):
        parts.append(f"at most {spec['maxLength']:,} characters")
    if "const" in spec:
        parts.append("fixed by the agent")
    return ", ".join(parts)


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
        Approval.objects.filter(state=State.PENDING, run__status__in=Run.NOT_TERMINAL)
        .select_related("run", "run__parent_run", "claimed_by")
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


SANDBOX_NOTE = (
    "SANDBOX: this run is a sandboxed fork. Its write tools are not called; "
    "approving it changes nothing outside."
)


def notify_reviewers(approval: Approval) -> int:
    """Email every reviewer that an approval is waiting, with an absolute link to it."""
    recipients = sorted(reviewers().values_list("email", flat=True))
    if not recipients:
        return 0
    run = approval.run
    sandbox = "[SANDBOX] " if run.sandbox else ""
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
    if run.sandbox:
        lines[1:1] = ["", SANDBOX_NOTE]
    subject = f"{sandbox}Approval needed: {approval.name} ({run.agent})"
    return send_mail(subject, "\n".join(lines), None, recipients)


@receiver(signals.approval_opened, dispatch_uid="durableruns.notify_reviewers")
def _mail_reviewers(sender: Any, approval: Approval, **kwargs: Any) -> None:
    notify_reviewers(approval)
