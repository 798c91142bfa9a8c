"""Named crash points at every boundary of the step and effect protocol.

`crashtest` and the chaos tests arm one point for one run by writing a file
`<DURABLERUNS_CRASH_DIR>/<run_id>` containing `POINT@POSITION` (the step
position; run-level points use -1). The executing worker process replaces it by
`<run_id>.fired` (what fired, and when: the start of "time to resume"), so the
crash fires once, and kills itself with SIGKILL: no cleanup, no `finally`, no
unlock, like the OOM killer.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from .errors import UsageError

BEFORE_STEP = "before_step"
AFTER_EFFECT_STARTED = "after_effect_started"
AFTER_TOOL_RETURNED = "after_tool_returned"
DURING_RESULT_COMMIT = "during_result_commit"
AFTER_STEP_COMMIT = "after_step_commit"
AFTER_RUN_FINISHED = "after_run_finished"
# A child run has committed its end, and its parent is not woken yet. Armed on the
# parent's id at the position of its step that waits for the child; it fires in the
# child's executor (engine/children.py), and the sweeper must wake the parent.
AFTER_CHILD_FINISHED = "after_child_finished"
# Inside a fan-out (engine/parallel.py), armed at a branch after the first: the branches
# before it have committed, it and the ones after it have not started.
MID_FAN_OUT = "mid_fan_out"

ALL = (
    BEFORE_STEP,
    AFTER_EFFECT_STARTED,
    AFTER_TOOL_RETURNED,
    DURING_RESULT_COMMIT,
    AFTER_STEP_COMMIT,
    MID_FAN_OUT,
    AFTER_RUN_FINISHED,
)
# Points that exist only on steps that perform an effect (a write tool).
EFFECT_ONLY = (AFTER_EFFECT_STARTED, AFTER_TOOL_RETURNED, DURING_RESULT_COMMIT)
# Points that exist only inside a fan-out, at a branch after the first.
FAN_OUT_ONLY = (MID_FAN_OUT,)
# Points that exist once per run, not per step; armed at position -1.
RUN_LEVEL = (AFTER_RUN_FINISHED,)
RUN_POSITION = -1
# Points that exist only at a step that waits for a child run (crashtest plans them
# for such steps only, so they are not in ALL).
CHILD_ONLY = (AFTER_CHILD_FINISHED,)
# Every point crashtest plans by default (each only where it applies).
PLANNED = ALL + CHILD_ONLY


def applies(point: str, *, has_effect: bool, later_branch: bool = False) -> bool:
    """Whether `point` exists at a step (with or without a write effect; a branch of a
    fan-out other than its first)."""
    if point in RUN_LEVEL:
        return False
    if point in FAN_OUT_ONLY:
        return later_branch
    return has_effect or point not in EFFECT_ONLY


def arm(crash_dir: str | Path, run_id: str, point: str, position: int | None = None) -> None:
    """Arm one crash for one run: at `point` of the step at `position`."""
    if point not in PLANNED:
        known = ", ".join(PLANNED)
        raise UsageError(f"unknown crash point {point!r}; known: {known}")
    if point in RUN_LEVEL:
        position = RUN_POSITION if position is None else position
        if position != RUN_POSITION:
            raise UsageError(f"{point} is a run-level point: it takes no step position")
    elif position is None or position < 0:
        raise UsageError(f"{point} needs a step position (0 or more)")
    Path(crash_dir).mkdir(parents=True, exist_ok=True)
    Path(crash_dir, run_id).write_text(f"{point}@{position}")


def is_armed(crash_dir: str | Path, run_id: str) -> bool:
    return Path(crash_dir, run_id).exists()


def fired(crash_dir: str | Path, run_id: str) -> dict[str, Any] | None:
    """What fired for this run ({point, position, pid, at}), or None if nothing did."""
    try:
        return json.loads(Path(crash_dir, f"{run_id}.fired").read_text())
    except (OSError, ValueError):
        return None


def armed_position(run_id: str, point: str) -> int | None:
    """The position `point` is armed at for this run in this process, if it is."""
    crash_dir = settings.DURABLERUNS_CRASH_DIR
    if not crash_dir:
        return None
    try:
        armed, _, position = Path(crash_dir, run_id).read_text().strip().partition("@")
        return int(position) if armed == point else None
    except (OSError, ValueError):
        return None


def crash_point(point: str, run_id: str, position: int = -1, *, fence: int | None = None) -> None:
    """Kill this process here if a crash is armed for this run, point and position.
    `fence`: the killed execution's lease, in the record, so a tester tells a resume
    (a later fence) from the killed execution even if it looks only after both."""
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
    _record_firing(plan, point, position, fence)
    plan.unlink()  # fire once: the recovering worker must get past this point
    os.kill(os.getpid(), signal.SIGKILL)


def _record_firing(plan: Path, point: str, position: int, fence: int | None) -> None:
    record = {
        "point": point,
        "position": position,
        "pid": os.getpid(),
        "at": time.time(),
        "fence": fence,
    }
    partial = plan.with_name(f"{plan.name}.firing")
    partial.write_text(json.dumps(record))
    partial.replace(plan.with_name(f"{plan.name}.fired"))  # readers never see half a record
