"""Template helpers for approvals: the nav count, a run's approvals and audit trail,
and JSON shown readably (always as text: autoescaping applies to the result)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.db.models import Q

from ..approvals import pending
from ..models import AuditEvent, Run

register = template.Library()


@register.simple_tag
def pending_approvals_count() -> int:
    return pending().count()


@register.simple_tag
def run_approvals(run: Run) -> list[Any]:
    return list(run.approvals.select_related("run").order_by("position"))


@register.simple_tag
def audit_trail(run: Run) -> list[AuditEvent]:
    """Human (and system) actions on this run and its approvals, oldest first."""
    approval_ids = [str(pk) for pk in run.approvals.values_list("pk", flat=True)]
    about_run = Q(target_type="run", target_id=str(run.pk))
    about_approvals = Q(target_type="approval", target_id__in=approval_ids)
    return list(AuditEvent.objects.filter(about_run | about_approvals).order_by("created_at", "pk"))


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.filter
def is_mapping(value: Any) -> bool:
    return isinstance(value, dict)
