"""A fan-out of refunds for the parallel-steps chaos tests; workers import it through
DURABLERUNS_AGENT_MODULES. The stand-in payments provider counts every execution."""

from __future__ import annotations

import durableruns as dr
from durableruns.demo.tools import refund, refund_unsafe


@dr.agent("parallel-refunds", version="1", max_steps=20)
def parallel_refunds(run: dr.Run, task: dict) -> int:
    tool = refund_unsafe if task.get("unsafe") else refund
    orders = [{"order_id": f"A-{i}", "cents": 100 + i} for i in range(task["width"])]
    refunds = run.map(tool, orders)
    return len(refunds)
