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
    position: int
    kind: str
    label: str
    x: float
    y: int
    width: float
    duration_ms: float
    offset_ms: float


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
        bars.append(Bar(
            position=step.position, kind=step.kind, label=f"#{step.position} {step.name}"[:28],
            x=round(LABEL_WIDTH + offset * scale, 2), y=row * ROW_HEIGHT,
            width=round(max(duration * scale, 1.0), 2),
            duration_ms=duration, offset_ms=offset,
        ))
    return {
        "bars": bars, "height": len(steps) * ROW_HEIGHT + 18,
        "width": LABEL_WIDTH + PLOT_WIDTH, "axis_y": len(steps) * ROW_HEIGHT + 12,
        "plot_x": LABEL_WIDTH, "plot_end": LABEL_WIDTH + PLOT_WIDTH, "total_ms": total_ms,
        "bar_height": BAR_HEIGHT,
    }
