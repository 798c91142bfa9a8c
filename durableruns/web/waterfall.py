"""A waterfall picture of step timings, as numbers an SVG template can draw.

No charting dependency: each step is a bar from its start to its finish on a
shared time axis that begins when the first step started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROW_HEIGHT = 16
BAR_HEIGHT = 12
LABEL_WIDTH = 190
PLOT_WIDTH = 560


@dataclass
class Bar:
    """One step's bar. Coordinates are strings, formatted here once: template number
    filters cost more than the rest of a 200-step page."""

    position: int
    kind: str
    label: str
    x: str
    width: str
    text_y: str
    rect_y: str
    title: str


def waterfall(steps: list[Any]) -> dict[str, Any]:
    if not steps:
        return {"bars": [], "height": 0, "width": LABEL_WIDTH + PLOT_WIDTH, "total_ms": 0}
    origin = min(step.started_at for step in steps)
    end = max(step.finished_at for step in steps)
    total_ms = max((end - origin).total_seconds() * 1000, 1.0)
    scale = PLOT_WIDTH / total_ms
    bars = []
    for row, step in enumerate(steps):
        offset = (step.started_at - origin).total_seconds() * 1000
        duration = max(step.duration_ms, 0.0)
        y = row * ROW_HEIGHT
        bars.append(
            Bar(
                position=step.position,
                kind=step.kind,
                label=f"#{step.position} {step.name}"[:28],
                x=f"{LABEL_WIDTH + offset * scale:.2f}",
                width=f"{max(duration * scale, 1.0):.2f}",
                text_y=str(y + 11),
                rect_y=str(y + 2),
                title=f"#{step.position} {step.kind}: {duration:.1f} ms, from +{offset:.0f} ms",
            )
        )
    axis_y = len(steps) * ROW_HEIGHT + 12
    return {
        "bars": bars,
        "height": str(axis_y + 6),
        "width": str(LABEL_WIDTH + PLOT_WIDTH),
        "axis_y": str(axis_y - 8),
        "label_y": str(axis_y + 4),
        "plot_x": str(LABEL_WIDTH),
        "plot_end": str(LABEL_WIDTH + PLOT_WIDTH),
        "total": f"{total_ms:.0f} ms",
        "bar_height": str(BAR_HEIGHT),
    }
