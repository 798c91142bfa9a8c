"""An admin reveals one sealed value (invariant 10), with a reason, audited.

Pages, the API and exports show what redaction left; the originals are sealed
(engine/vault.py). Revealing one needs the manage-policies permission and a reason of a few words,
and leaves an audit event on the run naming the row, the field and the reason
(never the value), in the same transaction as the decryption is allowed.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from .. import roles
from ..engine import vault
from ..engine.errors import SecretsUnavailable
from ..engine.redaction import redact_text
from ..models import Approval, Effect, Run, Step
from . import audit

TARGETS: dict[str, type] = {"run": Run, "step": Step, "effect": Effect, "approval": Approval}
MAX_REASON = 500
# A reason someone reading the audit trail later can act on: "x" or "because" is none.
MIN_REASON_WORDS, MIN_REASON_CHARS = 3, 10


class RevealError(ValueError):
    """Nothing to reveal there, or no reason given; the message says which."""


def sealed_fields(row: Any) -> list[str]:
    """The fields of `row` that hold a sealed original (what an admin may reveal)."""
    try:
        return sorted(vault.unseal(row.secrets))
    except SecretsUnavailable:
        return []


def find(run_id: str, kind: str, pk: str) -> Any:
    model = TARGETS.get(kind)
    if model is None:
        raise RevealError(f"unknown kind {kind!r}; one of {', '.join(TARGETS)}")
    rows = Run.objects.filter(pk=run_id) if model is Run else model.objects.filter(run_id=run_id)
    row = rows.filter(pk=pk).first()
    if row is None:
        raise RevealError(f"run {run_id} has no {kind} {pk}")
    return row


def reveal(user: Any, row: Any, field: str, reason: str) -> Any:
    """The original value of `row.field`, audited on the row's run."""
    if not getattr(user, "is_authenticated", False) or not user.has_perm(roles.MANAGE_POLICIES):
        raise PermissionDenied(f"revealing a secret needs {roles.MANAGE_POLICIES}")
    reason = (reason or "").strip()
    if len(reason.split()) < MIN_REASON_WORDS or len(reason) < MIN_REASON_CHARS:
        raise RevealError(
            f"say why you need to see it, in at least {MIN_REASON_WORDS} words "
            f"({MIN_REASON_CHARS} characters): the reason is audited"
        )
    if len(reason) > MAX_REASON:
        raise RevealError(f"the reason is limited to {MAX_REASON} characters")
    try:
        originals = vault.unseal(row.secrets)
    except SecretsUnavailable as exc:
        raise RevealError(exc.message) from None
    if field not in originals:
        raise RevealError(
            f"{field!r} holds nothing sealed: it was never redacted, or retention shredded it"
        )
    run = row if isinstance(row, Run) else row.run
    kind = type(row)._meta.model_name
    with transaction.atomic():
        audit.record(
            user,
            "secret.reveal",
            run,
            after={"row": f"{kind} {row.pk}", "field": field, "reason": redact_text(reason)},
        )
    return originals[field]
