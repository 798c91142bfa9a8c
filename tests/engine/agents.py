"""Agents used by the in-process engine tests. `CALLS` counts real executions."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import durableruns as dr
from durableruns.engine.errors import TransientError

CALLS: Counter = Counter()
FAILURES: Counter = Counter()


def _count(name: str, value: object = None) -> object:
    CALLS[name] += 1
    return value if value is not None else name


def _flaky(name: str, failures: int) -> str:
    CALLS[name] += 1
    if FAILURES[name] < failures:
        FAILURES[name] += 1
        raise dr.TransientError(f"{name} failed ({FAILURES[name]})")
    return name


def _permanent() -> None:
    raise dr.PermanentError("the card was declined")


def _not_json() -> object:
    return {"ids": {1, 2}}


@dr.agent("t-sleepy", version="1", max_steps=10)
def sleepy(run: dr.Run, task: dict) -> dict:
    first = run.step("first", _count, "first")
    run.sleep("nap", task.get("seconds", 0.2))
    second = run.step("second", _count, "second")
    return {"first": first, "second": second}


@dr.agent("t-flaky", version="1")
def flaky(run: dr.Run, task: dict) -> str:
    return run.step("flaky", _flaky, "flaky", task["failures"])


@dr.agent("t-permanent", version="1")
def permanent(run: dr.Run, task: dict) -> None:
    run.step("charge", _permanent)


@dr.agent("t-recoverable", version="1")
def recoverable(run: dr.Run, task: dict) -> dict:
    def validate() -> None:
        raise dr.ModelRecoverableError("field 'amount' must be positive")

    try:
        run.step("validate", validate)
    except dr.ModelRecoverableError as exc:
        return {"told_model": str(exc)}
    return {"told_model": None}


@dr.agent("t-looping", version="1", max_steps=5)
def looping(run: dr.Run, task: dict) -> None:
    for i in range(100):
        run.step(f"spin-{i}", _count, "spin")


@dr.agent("t-slow", version="1", max_duration=timedelta(seconds=0.2))
def slow(run: dr.Run, task: dict) -> None:
    import time

    for i in range(50):
        run.step(f"tick-{i}", time.sleep, 0.05)


@dr.agent("t-not-json", version="1")
def not_json(run: dr.Run, task: dict) -> object:
    return run.step("make-set", _not_json)


@dr.agent("t-returns-set", version="1")
def returns_set(run: dr.Run, task: dict) -> object:
    return {1, 2, 3}


@dr.agent("t-bad-tool-call", version="1")
def bad_tool_call(run: dr.Run, task: dict) -> object:
    from durableruns.demo.tools import refund

    return run.call(refund, order_id="A-1001")  # no cents


SEEN: dict[str, list] = {}
FAILED_ONCE: set[str] = set()


@dr.agent("t-echo-twice", version="1")
def echo_twice(run: dr.Run, task: dict) -> object:
    """Records what the step returned on execution and again on replay."""
    value = run.step("echo", lambda: task["value"])
    SEEN.setdefault(run.id, []).append(value)

    def fail_once() -> None:
        if run.id not in FAILED_ONCE:
            FAILED_ONCE.add(run.id)
            raise TransientError("once, so that the next task replays 'echo'")

    run.step("boundary", fail_once)
    return value
