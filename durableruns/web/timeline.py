"""A trace-style timeline of a run: one row per step, on a shared time axis.

Each row's bar has up to three parts: the wait before the step started (queued for
a worker, or a retry's backoff), each earlier failed attempt as its own segment (their
times are in Step.attempt_times; rows from before them show only the wait) and the
recorded attempt's execution. The axis spans this run only: a
fork's steps copied from its parent are listed but kept off the axis, since they
ran in the parent's time.

A bar is drawn in seconds since the axis's origin, in an SVG whose viewBox is the axis
(`preserveAspectRatio="none"` stretches it to the plot's width; no inline style, CSP).
A row's rects therefore never change as the run goes on: only the viewBox does, and
static/durableruns/live.js sets it on every row from `data-axis-seconds` when a changed
poll brings a longer axis, so a poll sends the new rows alone (web/live_rows.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

NICE_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60)
NICE_STEPS += (120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400)
TARGET_TICKS = 6


@dataclass
class Bar:
    """Where a step's wait and execution lie, as formatted seconds since the origin."""

    wait_x: str
    wait_width: str
    run_x: str
    run_width: str
    title: str
    failed: list[tuple[str, str]]  # (x, width) of each failed attempt, in order


@dataclass
class Tick:
    x: str
    label: str
    anchor: str


def duration_text(seconds: float) -> str:
    """A duration in the unit a person reads: 850 ms, 12.4 s, 3 min 5 s, 2 h 10 min.
    Never negative: two clocks (the database's, a worker's) may disagree by a little."""
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def _tick_label(seconds: float, step: float) -> str:
    if step < 1:
        return f"{seconds:.3g} s" if seconds else "0"
    if step < 60:
        return f"{seconds:.0f} s" if seconds else "0"
    if step < 3600:
        return f"{seconds / 60:.0f} min" if seconds else "0"
    if step < 86400:
        return f"{seconds / 3600:.0f} h" if seconds else "0"
    return f"{seconds / 86400:.0f} d" if seconds else "0"


def _ticks(total: float) -> list[Tick]:
    # Past the nicest steps, whole days: a run open for months gets a few ticks, not one
    # a day (a live poll sends the axis again whenever it grows).
    days = math.ceil(total / NICE_STEPS[-1] / TARGET_TICKS) * NICE_STEPS[-1]
    step = next((s for s in NICE_STEPS if total / s <= TARGET_TICKS), days)
    ticks, value = [], 0.0
    while value <= total + 1e-9:
        x = 100 * value / total
        anchor = "start" if x < 5 else "end" if x > 95 else "middle"
        ticks.append(Tick(x=f"{x:.2f}%", label=_tick_label(value, step), anchor=anchor))
        value += step
    return ticks


# The narrowest bar, in seconds: SVG draws no rect of width 0, and app.css strokes the
# executions 1px wide whatever the scale, so a 1 ms step on a day's axis still shows.
THINNEST = 0.0001


def _sec(seconds: float) -> str:
    return f"{max(seconds, 0.0):.4f}"


def timeline(
    record: Any,
    steps: list[Any],
    *,
    pending_until: datetime | None = None,
    previous_end: datetime | None = None,
) -> dict:
    """Bars for `steps` (annotated with `.copied`) and ticks for the run's axis.

    Sets `step.bar` on each step that ran in this run. `pending_until` stretches the
    axis to a retry's due time, so the pending row can show when it fires.
    `previous_end` is when the step before the first of `steps` finished (a window of a
    long run): the first row's wait is then its own, as it is when the row is not first."""
    own = [step for step in steps if not step.copied]
    origin = record.started_at or record.created_at
    if own:
        origin = min(origin, own[0].started_at)
    now = timezone.now()
    ends = [record.finished_at or now] + [step.finished_at for step in own]
    if pending_until and not record.is_terminal:
        ends.append(pending_until)
    total = max((max(ends) - origin).total_seconds(), 0.001)
    previous_end = max(previous_end, origin) if previous_end else origin
    # Branches of one fan-out all waited from where the run was when it fanned out.
    fanned_out_at: dict[int, datetime] = {}
    for step in own:
        fan_out = getattr(step, "fan_out", None)
        since = previous_end if fan_out is None else fanned_out_at.setdefault(fan_out, previous_end)
        wait = max((step.started_at - since).total_seconds(), 0.0)
        ran = max((step.finished_at - step.started_at).total_seconds(), 0.0)
        start = (step.started_at - origin).total_seconds()
        attempts = _attempts(step.attempt_times, origin)
        step.bar = Bar(
            wait_x=_sec(start - wait),
            wait_width=_sec(wait),
            run_x=_sec(start),
            run_width=_sec(max(ran, THINNEST)),
            title=_title(step, wait, ran, start, attempts),
            failed=_segments(attempts),
        )
        step.wait_text = duration_text(wait)
        step.ran_text = duration_text(ran)
        previous_end = max(previous_end, step.finished_at)
    return {
        "ticks": _ticks(total),
        "total": duration_text(total),
        "origin": origin,
        "total_seconds": total,
        "seconds": _sec(total),  # every bar's viewBox width, and data-axis-seconds
        "last_end": previous_end,
    }


def _attempts(times: Any, origin: datetime) -> list[tuple[float, float, str]]:
    """(start, length, error) from `origin` of each failed attempt that has readable
    times; anything else in the JSON (an imported or hand-edited row) is left out.
    Attempts recorded before errors were kept have [started, finished] only."""
    found = []
    for item in times if isinstance(times, list) else []:
        try:
            started, finished = (datetime.fromisoformat(t) for t in item[:2])
            why = item[2] if len(item) > 2 and isinstance(item[2], str) else ""
            start = (started - origin).total_seconds()
            found.append((start, max((finished - started).total_seconds(), 0.0), why))
        except (TypeError, ValueError):
            continue
    return found


def failed_attempts(step: Any) -> list[str]:
    """Each earlier failed attempt of a step in words, with its error when recorded
    (the step page lists them; the bar's title says the same)."""
    # The origin only places the bars; here only lengths and errors are said.
    attempts = _attempts(step.attempt_times, step.started_at or timezone.now())
    first = max(step.attempts - len(attempts), 1)
    return [
        f"Attempt {n} failed after {duration_text(length)}" + (f": {why}" if why else "")
        for n, (_, length, why) in enumerate(attempts, first)
    ]


def _segments(attempts: list[tuple[float, float, str]]) -> list[tuple[str, str]]:
    return [(_sec(start), _sec(max(length, THINNEST))) for start, length, _ in attempts]


def _attempts_text(attempts: list[tuple[float, float, str]], last_failed: int) -> str:
    """Numbered back from the last failed attempt: a retry under way at an upgrade has
    times for its later attempts only."""
    first = max(last_failed - len(attempts) + 1, 1)
    return "; ".join(
        f"attempt {n} failed after {duration_text(length)} at +{duration_text(start)}"
        + (f" ({why})" if why else "")
        for n, (start, length, why) in enumerate(attempts, first)
    )


def _title(
    step: Any, wait: float, ran: float, start: float, attempts: list[tuple[float, float, str]]
) -> str:
    ran_text = f"ran {duration_text(ran)} from +{duration_text(start)}"
    label = f"#{step.position} {step.kind} {step.name}"
    if attempts:
        last = f"attempt {step.attempts} {ran_text}"
        failed = _attempts_text(attempts, step.attempts - 1)
        return f"{label}: waited {duration_text(wait)}; {failed}; {last}"
    waited = f"waited {duration_text(wait)}"
    if step.attempts > 1:  # a row from before attempt times were kept
        waited += f" (including {step.attempts - 1} failed attempt(s) and their backoff)"
    return f"{label}: {waited}, {ran_text}"


def pending_bar(record: Any, axis: dict) -> Bar | None:
    """The bar of the step being retried: from the last recorded step to its next attempt."""
    if record.wake_at is None or record.is_terminal:
        return None
    origin = axis["origin"]
    since = (axis["last_end"] - origin).total_seconds()
    due = (record.wake_at - origin).total_seconds()
    attempts = _attempts(record.retry_attempt_times, origin)
    title = f"next attempt at +{duration_text(due)}"
    return Bar(
        wait_x=_sec(since),
        wait_width=_sec(max(due - since, 0.0)),
        run_x=_sec(due),
        run_width=_sec(THINNEST),
        title=f"{_attempts_text(attempts, record.retry_attempts)}; {title}" if attempts else title,
        failed=_segments(attempts),
    )


STEP_ROW = (
    '<li class="step step-{kind}{failed}{branch_class}" id="step-{position}">'
    '<details hx-get="{url}" hx-trigger="toggle once" hx-target="find .step-body" '
    'hx-swap="innerHTML"><summary><span class="step-label">#{position} '
    '<span class="kind">{kind}</span> <strong>{name}</strong>{branch} · {attempts} · '
    "{duration} · "
    '<span class="origin">{origin}</span></span>{bar}</summary>'
    '<div class="step-body"><a href="{url}">Input, output and provenance of step {position}</a>'
    "</div></details></li>"
)
BAR = (
    '<svg class="bar" width="100%" height="12" viewBox="0 0 {axis} 12" '
    'preserveAspectRatio="none" role="img" aria-label="{title}"><title>{title}'
    '</title><rect class="wait{retried}" x="{wait_x}" width="{wait_width}" y="3" height="6"/>'
    '{failed}<rect class="ran" x="{run_x}" width="{run_width}" y="0" height="12"/></svg>'
)
FAILED_ATTEMPT = '<rect class="attempt-failed" x="{}" width="{}" y="1" height="10"/>'


def step_rows(steps: list[Any], step_url: str, axis: str) -> SafeString:
    """The timeline's rows, one <li> per step, built here rather than in a template
    loop: at 200 steps the template tags cost more than everything else on the page.
    `step_url` is a step page's URL with "{position}" where the position goes; `axis`
    is the axis's `seconds` (the browser updates it on rows already shown)."""
    rows = []
    for step in steps:
        bar = getattr(step, "bar", None)
        bar_html = (
            BAR.format(
                axis=axis,
                title=escape(bar.title),
                retried=" wait-retried" if step.attempts > 1 else "",
                wait_x=bar.wait_x,
                wait_width=bar.wait_width,
                run_x=bar.run_x,
                run_width=bar.run_width,
                failed="".join(FAILED_ATTEMPT.format(x, width) for x, width in bar.failed),
            )
            if bar
            else '<span class="bar-none"></span>'
        )
        rows.append(
            STEP_ROW.format(
                kind=escape(step.kind),
                failed=" step-error" if step.failed else "",
                branch_class=" step-branch" if _is_branch(step) else "",
                branch=_branch(step),
                position=step.position,
                url=step_url.replace("{position}", str(step.position)),
                name=escape(step.name),
                attempts=(
                    f'<span class="attempts">{step.attempts} attempts</span>'
                    if step.attempts > 1
                    else "1 attempt"
                ),
                duration=escape(step.duration_text),
                origin=_origin(step),
                bar=bar_html,
            )
        )
    return mark_safe("".join(rows))  # noqa: S308 - every value above is escaped or ours


def _is_branch(step: Any) -> bool:
    return getattr(step, "fan_out", None) is not None


def _branch(step: Any) -> str:
    """Which parallel branch the step is: its bar overlaps its fan-out's other bars."""
    if not _is_branch(step):
        return ""
    index = step.position - step.fan_out + 1
    return (
        f' <span class="branch" title="run.parallel: the branches ran at once">'
        f"∥ branch {index} of the fan-out at #{step.fan_out}</span>"
    )


def _origin(step: Any) -> str:
    if step.copied:
        return "reused from the parent run"
    if step.replays:
        return f"executed, replayed {step.replays} time{'s' if step.replays != 1 else ''}"
    return "executed"
