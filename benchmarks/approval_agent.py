"""The agent the approval-latency benchmark drives: ask, then one more step."""

from __future__ import annotations

import durableruns as dr


def _next_step(n: int) -> int:
    return n + 1


@dr.agent("bench-approval", version="1", max_steps=5)
def bench_approval(run: dr.Run, task: dict) -> dict:
    decision = run.approval("go", summary="benchmark approval", payload={"n": task["n"]})
    after = run.step("next", _next_step, task["n"])
    return {"approved": decision.approved, "after": after}
