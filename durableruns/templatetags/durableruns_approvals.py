"""Template helpers for approvals: the nav count, a run's approvals,
and JSON shown readably (always as text: autoescaping applies to the result)."""

from __future__ import annotations

import json
from typing import Any

from django import template

from ..models import Run
from ..services import approvals

register = template.Library()


@register.simple_tag
def pending_approvals_count() -> int:
    return approvals.pending().count()


@register.simple_tag
def run_approvals(run: Run) -> list[Any]:
    return list(run.approvals.select_related("run").order_by("position"))


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.filter
def is_mapping(value: Any) -> bool:
    return isinstance(value, dict)
