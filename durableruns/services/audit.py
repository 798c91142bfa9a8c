"""Recording human actions (invariant 11). Call `record()` in the same transaction
as the change it describes, so the log and the change commit together."""

from __future__ import annotations

from typing import Any

from ..engine.store import redacted
from ..models import AuditEvent


def record(
    actor: Any,
    action: str,
    target: Any,
    *,
    before: Any = None,
    after: Any = None,
    target_type: str | None = None,
) -> AuditEvent:
    """`actor` is a user, or None for the system (e.g. an approval that expired)."""
    return AuditEvent.objects.create(
        actor_id=getattr(actor, "pk", None),
        actor_name=getattr(actor, "username", None) or "system",
        action=action,
        target_type=target_type or type(target)._meta.model_name,
        target_id=str(target.pk),
        before=None if before is None else redacted(before),
        after=None if after is None else redacted(after),
    )
