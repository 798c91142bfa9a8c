"""Which of a run's steps and effects the run page shows: the newest WINDOW of them.

A 10,000-step run rendered whole cost a second and 9 MB per render, and a live page
re-rendered it every second for every viewer. The page shows the newest steps; older
ones are a link away (`?before=<position>`), a window of the same size each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    IntegerField,
    Q,
    QuerySet,
    Subquery,
)
from django.http import HttpRequest

from ..models import Effect, Run, Step

WINDOW = 100


@dataclass
class StepWindow:
    steps: list[Step]
    effects: list[Effect]
    older_before: int | None  # `?before=` of the previous window, when there is one
    newer: bool  # the window is not the newest one
    before: int | None  # the `?before=` this window was asked for
    previous: Step | None = None  # the step just before the window, when there is one

    @property
    def complete(self) -> bool:
        """Every step of the run is in the window."""
        return self.older_before is None and not self.newer

    @property
    def first_position(self) -> int | None:
        return self.steps[0].position if self.steps else None

    @property
    def last_position(self) -> int | None:
        return self.steps[-1].position if self.steps else None


def before_param(request: HttpRequest) -> int | None:
    """`?before=N` as a position; anything else (², -1, huge, text) is the newest window."""
    raw = request.GET.get("before", "")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        return None
    return int(raw)


def step_window(record: Run, before: int | None) -> StepWindow:
    """The window's steps (payloads deferred: a step's body loads when it is opened)
    and the effects of the same positions, plus every effect still in doubt, so the
    page never hides a pending or escalated write."""
    steps_qs: QuerySet[Step] = record.steps.defer("input", "result", "error").annotate(
        failed=ExpressionWrapper(Q(error__isnull=False), output_field=BooleanField())
    )
    if before is not None:
        steps_qs = steps_qs.filter(position__lt=before)
    newest_first = _newest_first(record, steps_qs, before)
    older = len(newest_first) > WINDOW
    steps = newest_first[:WINDOW][::-1]
    effects = _effects(record, steps, before, complete=not older and before is None)
    return StepWindow(
        steps=steps,
        effects=effects,
        older_before=steps[0].position if older and steps else None,
        newer=before is not None,
        before=before,
        previous=newest_first[WINDOW] if older else None,
    )


# How far below the newest position the window's query looks: positions are dense but
# for a fan-out's branches still under way, so twice the window holds it.
SPAN = 2 * (WINDOW + 1)


def _newest_first(record: Run, steps_qs: QuerySet[Step], before: int | None) -> list[Step]:
    """The newest WINDOW + 1 steps of `steps_qs`, newest first, read through a range of
    positions just wide enough for them. The planner takes most runs for a handful of
    steps (a run id that is not among the column's most common values), so on a long
    run `ORDER BY position DESC LIMIT 101` read and sorted all its steps (11 ms at
    10,000 steps, on every render and changed poll); with the range it reads at most
    SPAN rows whatever plan it picks. A range short of the window (a gap wider than
    the window, or positions not starting at 0) falls back to the unbounded query;
    so does an empty one below `?before=`, which may sit in such a gap (below the
    newest step, an empty range means the run has no steps)."""
    top: Any = before
    if top is None:
        newest = record.steps.order_by("-position").values("position")[:1]
        top = ExpressionWrapper(Subquery(newest) + 1, output_field=IntegerField())
    bounded = list(steps_qs.filter(position__gte=top - SPAN).order_by("-position")[: WINDOW + 1])
    if len(bounded) > WINDOW or (bounded[-1].position == 0 if bounded else before is None):
        return bounded
    return list(steps_qs.order_by("-position")[: WINDOW + 1])


def _effects(record: Run, steps: list[Step], before: int | None, complete: bool) -> list[Effect]:
    effects = record.effects.order_by("position")
    if complete:
        return list(effects)
    low = steps[0].position if steps else 0
    in_window = Q(position__gte=low)
    if before is not None:
        in_window &= Q(position__lt=before)
    doubtful = Q(state__in=[Effect.State.STARTED, Effect.State.UNKNOWN])
    return list(effects.filter(in_window | doubtful))
