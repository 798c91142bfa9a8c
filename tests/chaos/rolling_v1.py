"""Agent 'follow-up' as deploy 1 ships it: only version 1."""

from __future__ import annotations

import durableruns as dr


@dr.agent("follow-up", version="1")
def follow_up_v1(run: dr.Run, task: dict) -> dict:
    return {"version": "1", "greeting": run.step("greet", lambda: f"hello {task['name']}")}
