"""Template helpers for approvals: the nav count, a run's approvals and audit trail,
and JSON shown readably (always as text: autoescaping applies to the result)."""

from __future__ import annotations

import json
from typing import Any

from django import template

from .. import approvals
from ..models import AuditEvent, Run

register = template.Library()


@register.simple_tag
def pending_approvals_count() -> int:
    return approvals.pending().count()


@register.simple_tag
def run_approvals(run: Run) -> list[Any]:
    return list(run.approvals.select_related("run").order_by("position"))


@register.simple_tag
def audit_trail(run: Run) -> list[AuditEvent]:
    """Human (and system) actions on this run and its approvals, oldest first."""
    return list(approvals.audit_trail(run))


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.filter
def is_mapping(value: Any) -> bool:
    return isinstance(value, dict)
