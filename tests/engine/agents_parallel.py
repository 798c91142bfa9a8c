"""Agents with parallel steps (run.parallel, run.map, call_tools), for the in-process
engine tests. `CALLS` counts real executions per branch; `OVERLAP` is a barrier the
branches of one fan-out meet at, so a test proves they were in flight at once (a serial
fan-out would break it) without timing anything."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import durableruns as dr

CALLS: Counter = Counter()
FAILURES: Counter = Counter()
# What agent code asks for on the next pass: tests change it to make a run diverge.
VARIANT: dict[str, Any] = {}
_lock = threading.Lock()
OVERLAP: dict[str, threading.Barrier] = {}


def reset() -> None:
    CALLS.clear()
    FAILURES.clear()
    VARIANT.clear()
    OVERLAP.clear()


def _count(name: str) -> None:
    with _lock:
        CALLS[name] += 1


def echo(index: int, delay: float = 0.0) -> int:
    """Branch `index`, finishing after `delay` seconds (later branches first, if asked)."""
    time.sleep(delay)
    _count(f"branch-{index}")
    return index * 10


def meet(name: str) -> str:
    """Wait until every branch of the fan-out is here: proof they overlapped."""
    _count(name)
    OVERLAP["fan-out"].wait(timeout=10)
    return name


def flaky(name: str, failures: int) -> str:
    _count(name)
    with _lock:
        FAILURES[name] += 1
        failing = FAILURES[name] <= failures
    if failing:
        raise dr.TransientError(f"{name} failed ({FAILURES[name]})")
    return name


def declined(name: str) -> None:
    _count(name)
    raise dr.PermanentError(f"{name}: the card was declined")


@dr.tool(kind=dr.UNSAFE_WRITE)
def charge(order_id: str, cents: int, *, idempotency_key: str) -> dict:
    _count(f"charge-{order_id}")
    return {"order_id": order_id, "charged": cents, "key": idempotency_key}


@dr.agent("t-fan-out", version="1", max_steps=10)
def fan_out(run: dr.Run, task: dict) -> dict:
    delays = task.get("delays", [0.0, 0.0, 0.0])
    branches = [
        (lambda i=i, d=d: run.step(f"branch-{i}", echo, i, d)) for i, d in enumerate(delays)
    ]
    values = run.parallel(branches)
    if task.get("then_approval"):
        run.approval("after-fan-out", summary="look at the branches")
    return {"values": values, "after": run.step("after", echo, 99)}


@dr.agent("t-fan-out-variant", version="1", max_steps=10)
def fan_out_variant(run: dr.Run, task: dict) -> list:
    """Asks, on the next pass, for whatever VARIANT says branch 1 is."""
    second = VARIANT.get("second", 1)
    values = run.parallel(
        [
            lambda: run.step("branch-0", echo, 0),
            lambda: run.step("branch-1", echo, second),
            lambda: run.step("branch-2", echo, 2),
        ]
    )
    run.approval("hold", summary="hold the run between passes")
    return values


@dr.agent("t-overlap", version="1", max_steps=10)
def overlap(run: dr.Run, task: dict) -> list:
    names = [f"meet-{i}" for i in range(task["width"])]
    return run.parallel([(run.step, name, meet, name) for name in names])


@dr.agent("t-map-charges", version="1", max_steps=10)
def map_charges(run: dr.Run, task: dict) -> list:
    return run.map(charge, [{"order_id": order, "cents": 100} for order in task["orders"]])


@dr.agent("t-fan-out-budget", version="1", max_steps=3)
def fan_out_budget(run: dr.Run, task: dict) -> list:
    run.step("first", echo, 0)
    return run.parallel([(run.step, f"branch-{i}", echo, i) for i in range(1, 4)])


@dr.agent("t-fan-out-flaky", version="1", max_steps=10)
def fan_out_flaky(run: dr.Run, task: dict) -> list:
    return run.parallel(
        [
            (run.step, "steady-0", echo, VARIANT.get("first", 0)),
            (run.step, "flaky", flaky, "flaky", task["failures"]),
            (run.step, "steady-2", echo, 2),
        ]
    )


@dr.agent("t-fan-out-failing", version="1", max_steps=10)
def fan_out_failing(run: dr.Run, task: dict) -> Any:
    branches = [
        (run.step, "steady-0", echo, 0),
        (run.step, "declined-1", declined, "declined-1"),
        (run.step, "declined-2", declined, "declined-2"),
        (run.step, "steady-3", echo, 3),
    ]
    if task.get("return_exceptions"):
        values = run.parallel(branches, return_exceptions=True)
        return [str(value) if isinstance(value, Exception) else value for value in values]
    return run.parallel(branches)


@dr.agent("t-fan-out-approval", version="1", max_steps=10)
def fan_out_approval(run: dr.Run, task: dict) -> dict:
    decision, value = run.parallel(
        [
            lambda: run.approval("go-ahead", summary="may the branch go on?"),
            (run.step, "branch-1", echo, 1),
        ]
    )
    return {"approved": decision.approved, "value": value}


@dr.agent("t-fan-out-misuse", version="1", max_steps=10)
def fan_out_misuse(run: dr.Run, task: dict) -> list:
    def two_steps() -> int:
        run.step("one", echo, 1)
        return run.step("two", echo, 2)

    return run.parallel([(run.step, "fine", echo, 0), two_steps])


def _meeting_tool(name: str) -> dr.Tool:
    def tool(topic: str, *, idempotency_key: str) -> dict:
        return {"tool": meet(name), "topic": topic}

    tool.__name__ = name
    return dr.tool(kind=dr.READ_ONLY)(tool)


MEETING_TOOLS = [_meeting_tool(f"meet_{letter}") for letter in "abc"]
MEETING_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": tool.name,
            "parameters": {
                "type": "object",
                "properties": {"topic": {"type": "string", "default": "refunds"}},
                "required": ["topic"],
            },
        },
    }
    for tool in MEETING_TOOLS
]


@dr.agent("t-tool-calls-at-once", version="1", max_steps=10)
def tool_calls_at_once(run: dr.Run, task: dict) -> str:
    """The stand-in model's first reply calls all three tools at once."""
    messages = [{"role": "user", "content": task["question"]}]
    reply = run.llm("turn-0", messages=messages, tools=MEETING_SCHEMAS)
    run.call_tools(reply, MEETING_TOOLS, messages=messages)
    return run.llm("turn-1", messages=messages, tools=MEETING_SCHEMAS).content or ""


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def send_notice(*, idempotency_key: str) -> str:
    _count("send-notice")
    return "sent"


@dr.agent("t-fan-out-bare-tool", version="1", max_steps=10)
def fan_out_bare_tool(run: dr.Run, task: dict) -> list:
    """A slip people make: the tool itself as a branch, not `lambda: run.call(tool)`."""
    return run.parallel([send_notice, (send_notice,)])
