"""Template filters for the dashboard. Output is plain text: autoescaping still applies."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django import template
from django.utils import timezone

from ..web.timeline import duration_text

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON for a stored payload (escaped by the template like any text)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def short_json(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def seconds(value: float) -> str:
    """A duration for people: 850 ms, 12.4 s, 3 min 5 s, 2 h 10 min (as the timeline)."""
    return duration_text(float(value or 0))


@register.filter
def run_duration(run: Any) -> str:
    """How long a run took, or has been going: empty before it started."""
    if run.started_at is None:
        return ""
    end = run.ended_at or timezone.now()
    return seconds(max((end - run.started_at).total_seconds(), 0.0))


@register.filter
def dollars(value: Any) -> str:
    """A model cost: cents for sums, more digits for a fraction of a cent."""
    amount = Decimal(value or 0)
    if amount == 0:
        return "$0"
    return f"${amount:.2f}" if amount >= 1 else f"${amount:.6f}".rstrip("0")


@register.filter
def run_cost(run: Any) -> str:
    """A run's cost, or why there is none: no model call yet, or models without a price."""
    if run.cost:
        return dollars(run.cost)
    return "not priced" if run.tokens_in or run.tokens_out else "—"
