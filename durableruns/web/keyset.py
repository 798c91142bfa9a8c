"""Keyset pagination: a page is "the next N rows after this key".

Unlike OFFSET, rows inserted while someone pages never shift, repeat or hide what
they see, and a deep page costs the same as the first (an index range scan).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Q, QuerySet

from ..models import Effect, Run
from ..validation import InvalidInput, check_text, integer, moment

RUN_ORDER = ("-created_at", "id")  # matches the run_created index (created_at DESC, id)
COST_ORDER = ("-cost", "id")  # matches the run_cost index (cost DESC, id)
EFFECT_ORDER = ("-id",)


@dataclass
class Page:
    rows: list[Any]
    next_cursor: str | None


def _encode(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(cursor: str) -> str:
    """The text of a cursor this module wrote; anything else is a 400 (InvalidInput)."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidInput("cursor", "is not a cursor from a next-page link") from None
    return check_text(text, "cursor")


def run_cursor(run: Run) -> str:
    return _encode(f"{run.created_at.isoformat()}|{run.id}")


def runs_after(queryset: QuerySet[Run], cursor: str | None) -> QuerySet[Run]:
    """Runs strictly after `cursor` in RUN_ORDER; an unreadable cursor is a 400."""
    if cursor:
        created, _, run_id = _decode(cursor).partition("|")
        if not run_id:
            raise InvalidInput("cursor", "is not a cursor from a next-page link")
        created_at = moment(created, "cursor")
        # The redundant `created_at <= c` gives Postgres an index range start.
        queryset = queryset.filter(created_at__lte=created_at).filter(
            Q(created_at__lt=created_at) | Q(created_at=created_at, id__gt=run_id)
        )
    return queryset.order_by(*RUN_ORDER)


def cost_cursor(run: Run) -> str:
    return _encode(f"{run.cost}|{run.id}")


def runs_by_cost_after(queryset: QuerySet[Run], cursor: str | None) -> QuerySet[Run]:
    """Runs strictly after `cursor` in COST_ORDER (the most expensive first)."""
    if cursor:
        text, _, run_id = _decode(cursor).partition("|")
        try:
            cost = Decimal(text)
        except InvalidOperation:
            cost = None
        if not run_id or cost is None or not cost.is_finite():
            raise InvalidInput("cursor", "is not a cursor from a next-page link")
        queryset = queryset.filter(cost__lte=cost).filter(
            Q(cost__lt=cost) | Q(cost=cost, id__gt=run_id)
        )
    return queryset.order_by(*COST_ORDER)


def effects_after(queryset: QuerySet[Effect], cursor: str | None) -> QuerySet[Effect]:
    if cursor:
        queryset = queryset.filter(id__lt=integer(_decode(cursor), "cursor"))
    return queryset.order_by(*EFFECT_ORDER)


def effect_cursor(effect: Effect) -> str:
    return _encode(str(effect.id))


def page(queryset: QuerySet[Any], size: int, cursor_of: Any) -> Page:
    """Fetch one extra row to know whether there is a next page."""
    rows = list(queryset[: size + 1])
    if len(rows) > size:
        return Page(rows[:size], cursor_of(rows[size - 1]))
    return Page(rows, None)
