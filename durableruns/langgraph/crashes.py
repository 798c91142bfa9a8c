"""crashtest's crash points in a LangGraph thread (engine/crashpoints.py).

LangGraph executes the thread, so its boundaries are the saver's: a node's task has
returned (its side effects done) and its writes are about to be stored
(AFTER_TOOL_RETURNED) or were stored (AFTER_STEP_COMMIT); a checkpoint that schedules
the next superstep was stored (BEFORE_STEP, which LangGraph may already be running:
checkpoints are saved in the background). The position is the superstep the node
runs in (`langgraph_step`, as in `idempotency_key`). Nothing here runs unless
DURABLERUNS_CRASH_DIR names a directory with a crash armed for the thread.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from durableruns.engine import crashpoints
from durableruns.langgraph.store import run_id_for
from durableruns.models import LangGraphCheckpoint

# How long a task's writes wait for the checkpoint they belong to (saved in the
# background, possibly after them) to show its step. Crash tests only.
STEP_WAIT_SECONDS = 5.0
_steps: dict[tuple[str, str], int | None] = {}  # (run id, checkpoint id): step; armed only


def armed(thread_id: str) -> str | None:
    """The thread's run id if a crash is armed for it, else None (the usual case)."""
    crash_dir = settings.DURABLERUNS_CRASH_DIR
    if not crash_dir:
        return None
    run_id = run_id_for(thread_id)
    return run_id if crashpoints.is_armed(crash_dir, run_id) else None


def checkpoint_made(thread_id: str, ns: str, row: dict[str, Any]) -> None:
    """Remember a root checkpoint's step before it is stored: its tasks' writes may
    arrive while it waits for the database (or for the checkpoint before it)."""
    run_id = armed(thread_id)
    if run_id and ns == "":
        _steps[run_id, row["checkpoint_id"]] = row["step"]


def checkpoint_stored(thread_id: str, ns: str, row: dict[str, Any]) -> None:
    """BEFORE_STEP of the superstep a root checkpoint schedules."""
    run_id = armed(thread_id)
    if run_id and ns == "" and row["next_nodes"] and row["step"] is not None:
        crashpoints.crash_point(crashpoints.BEFORE_STEP, run_id, row["step"] + 1)


def task_writes(point: str, thread_id: str, ns: str, checkpoint_id: str, rows: Sequence) -> None:
    """AFTER_TOOL_RETURNED or AFTER_STEP_COMMIT of a root node's regular writes (not
    an error, an interrupt or a resume)."""
    run_id = armed(thread_id)
    if not run_id or ns != "" or not rows or any(r["idx"] < 0 for r in rows):
        return
    step = _step_of(run_id, checkpoint_id)
    if step is not None:
        crashpoints.crash_point(point, run_id, step + 1)


def _step_of(run_id: str, checkpoint_id: str) -> int | None:
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while True:
        if (run_id, checkpoint_id) in _steps:
            return _steps[run_id, checkpoint_id]
        step = (
            LangGraphCheckpoint.objects.filter(
                thread_id=run_id, checkpoint_ns="", checkpoint_id=checkpoint_id
            )
            .values_list("step", flat=True)
            .first()
        )
        if step is not None or time.monotonic() > deadline:
            return step
        time.sleep(0.02)
