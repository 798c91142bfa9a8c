"""Test-only agents for the fault tests, written against the public agent-author API.

Workers import this module through DURABLERUNS_AGENT_MODULES
(`durableruns.demo.agents,tests.agents`); they run with the repository root as
their working directory, so `tests` is importable.

Every slow step appends `start|end POSITION PID TIME` to a ledger file named in
the run's input, so a test can see which process executed which step and when,
even when that process was a zombie whose checkpoint the fence rejected.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import durableruns as dr
from durableruns.demo import tools


def _note(ledger: str, event: str, position: int) -> None:
    # One small O_APPEND write per line: lines from several processes never interleave.
    line = f"{event} {position} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _work(ledger: str, position: int, seconds: float) -> dict:
    _note(ledger, "start", position)
    time.sleep(seconds)
    _note(ledger, "end", position)
    return {"pid": os.getpid()}


@dr.agent("slow-bot", version="1", max_steps=200, max_duration=timedelta(minutes=10))
def slow_bot(run: dr.Run, task: dict) -> dict:
    """Several slow compute steps, then optionally a refund at a non-idempotent provider.

    Input: {"ledger": "/path", "steps": 3, "seconds": 0.5, "refund": "none" | ""}
    """
    pids = []
    for position in range(int(task.get("steps", 3))):
        done = run.step(
            f"work-{position}", _work, task["ledger"], position, float(task.get("seconds", 0.5))
        )
        pids.append(done["pid"])
    if task.get("refund"):
        tool = tools.REFUND_TOOLS[task["refund"]]
        order = run.call(tools.lookup_order, order_id="A-1001")
        run.call(tool, order_id=order["id"], cents=order["cents"])
    return {"pids": pids}


@dr.tool(kind=dr.IDEMPOTENT_WRITE, name="slow_refund")
def slow_refund(order_id: str, cents: int, pause: float, *, idempotency_key: str) -> dict:
    """Refund at the deduplicating provider, then linger before the result is committed."""
    receipt = tools.refund.fn(order_id=order_id, cents=cents, idempotency_key=idempotency_key)
    time.sleep(pause)
    return receipt


@dr.agent("slow-refund-bot", version="1", max_steps=20, max_duration=timedelta(minutes=10))
def slow_refund_bot(run: dr.Run, task: dict) -> dict:
    """The refund flow with a window between the provider call and the result commit.

    Input: {"order_id": "A-1001", "pause": 0.4}
    """
    order = run.call(tools.lookup_order, order_id=task["order_id"])
    receipt = run.call(
        slow_refund, order_id=order["id"], cents=order["cents"], pause=float(task.get("pause", 0.4))
    )
    run.call(
        tools.send_email,
        to=order["customer"],
        subject=f"Refund for {order['id']}",
        body=f"Refunded ({receipt['refund_id']}).",
    )
    return {"refund_id": receipt["refund_id"]}
