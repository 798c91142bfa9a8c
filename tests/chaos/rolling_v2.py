"""Agent 'follow-up' as deploy 2 ships it: versions 1 and 2 (new runs start on 2)."""

from __future__ import annotations

import durableruns as dr
from tests.chaos import rolling_v1  # noqa: F401 - deploy 2 still serves version 1 runs


@dr.agent("follow-up", version="2")
def follow_up_v2(run: dr.Run, task: dict) -> dict:
    return {"version": "2", "greeting": run.step("greet", lambda: f"hi {task['name']}")}
