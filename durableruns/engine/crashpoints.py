"""Named crash points at every boundary of the step and effect protocol.

`crashtest` and the chaos tests arm one point for one run by writing a file
`<DURABLERUNS_CRASH_DIR>/<run_id>` containing `POINT@POSITION`. The executing
worker process deletes the file (so the crash fires once) and kills itself with
SIGKILL: no cleanup, no `finally`, no unlock, like the OOM killer.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from django.conf import settings

BEFORE_STEP = "before_step"
AFTER_EFFECT_STARTED = "after_effect_started"
AFTER_TOOL_RETURNED = "after_tool_returned"
DURING_RESULT_COMMIT = "during_result_commit"
AFTER_STEP_COMMIT = "after_step_commit"
AFTER_RUN_FINISHED = "after_run_finished"

ALL = (
    BEFORE_STEP,
    AFTER_EFFECT_STARTED,
    AFTER_TOOL_RETURNED,
    DURING_RESULT_COMMIT,
    AFTER_STEP_COMMIT,
    AFTER_RUN_FINISHED,
)
# Points that exist only on steps that perform an effect (a write tool).
EFFECT_ONLY = (AFTER_EFFECT_STARTED, AFTER_TOOL_RETURNED, DURING_RESULT_COMMIT)


def arm(crash_dir: str | Path, run_id: str, point: str, position: int) -> None:
    if point not in ALL:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(ALL)}")
    Path(crash_dir).mkdir(parents=True, exist_ok=True)
    Path(crash_dir, run_id).write_text(f"{point}@{position}")


def crash_point(point: str, run_id: str, position: int = -1) -> None:
    """Kill this process here if a crash is armed for this run, point and position."""
    crash_dir = settings.DURABLERUNS_CRASH_DIR
    if not crash_dir:
        return
    plan = Path(crash_dir, run_id)
    try:
        armed = plan.read_text().strip()
    except OSError:
        return
    if armed != f"{point}@{position}":
        return
    plan.unlink()  # fire once: the recovering worker must get past this point
    os.kill(os.getpid(), signal.SIGKILL)
