"""The agent mix of the fleet chaos test (test_fleet_crash.py): agents that wait in a
step, as runs waiting on a model do, around writes whose every real execution is
appended to a file, so the test counts duplicates without a provider (200 runs calling
an HTTP stand-in at once would need 200 Postgres sessions on the test server).

Each kind of agent (a plain waiter, a fan-out, a parent whose child waits) reaches a
"wait" step that calls `wait_at_gate`; the test spreads its runs over MIX.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import durableruns as dr


def _append(path: str, line: str) -> None:
    # One short O_APPEND write: lines from many threads and processes never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def wait_at_gate(task: dict) -> dict:
    """Say this run is in flight (run id and pid), then wait until the gate file exists."""
    _append(task["ledger"], f"waiting {task['name']} {os.getpid()}")
    deadline = time.monotonic() + float(task.get("timeout", 300))
    while not Path(task["gate"]).exists():
        if time.monotonic() > deadline:
            raise dr.PermanentError("the gate never opened")
        time.sleep(0.1)
    return {"pid": os.getpid()}


@dr.tool(kind=dr.UNSAFE_WRITE, name="fleet_write")
def fleet_write(effects: str, what: str, *, idempotency_key: str) -> dict:
    """A write that cannot deduplicate: every call is a real execution, appended."""
    _append(effects, idempotency_key)
    return {"wrote": what}


@dr.agent("fleet-waiter", version="1", max_steps=20, max_duration=timedelta(minutes=15))
def fleet_waiter(run: dr.Run, task: dict) -> dict:
    """A write, a long wait in a step, another write."""
    before = run.call(fleet_write, effects=task["effects"], what="before")
    waited = run.step("wait", wait_at_gate, task)
    after = run.call(fleet_write, effects=task["effects"], what="after")
    return {"before": before, "after": after, "waited_in": waited["pid"]}


@dr.agent("fleet-fan-out", version="1", max_steps=20, max_duration=timedelta(minutes=15))
def fleet_fan_out(run: dr.Run, task: dict) -> dict:
    """A fan-out of a write and the long wait: killed mid-fan-out (the write committed,
    the wait not), so a resume must execute the wait branch only."""
    before, waited = run.parallel(
        [
            lambda: run.call(fleet_write, effects=task["effects"], what="branch"),
            lambda: run.step("wait", wait_at_gate, task),
        ]
    )
    after = run.call(fleet_write, effects=task["effects"], what="after")
    return {"before": before, "after": after, "waited_in": waited["pid"]}


@dr.agent("fleet-parent", version="1", max_steps=20, max_duration=timedelta(minutes=15))
def fleet_parent(run: dr.Run, task: dict) -> dict:
    """A parent whose child waits: killed while the child runs (the parent holds no
    thread, only its awaiting_child row), then a write after the child's result."""
    child = run.child(fleet_waiter, task)
    after = run.call(fleet_write, effects=task["effects"], what="after child")
    return {"child": child, "after": after}


WAITER = Counter({"0-fleet_write:fleet_write": 1, "2-fleet_write:fleet_write": 1})
# (agent, extra input, the writes one uninterrupted run executes, per "step_id:tool";
# a child run's as "c<position>/step_id:tool")
MIX = [
    ("fleet-waiter", {}, WAITER),
    ("fleet-fan-out", {}, WAITER),  # branches at 0 and 1, the last write at 2
    (
        "fleet-parent",
        {},
        Counter({f"c0/{key}": n for key, n in WAITER.items()})
        + Counter({"1-fleet_write:fleet_write": 1}),
    ),
]


def executions(effects: Path) -> dict[str, Counter]:
    """Real executions per run, per "step_id:tool", read from the effects file."""
    per_run: dict[str, Counter] = {}
    if effects.exists():
        for key in effects.read_text().split():
            run_id, step_id, tool = key.split(":")[:3]
            run_id, _, child = run_id.partition(".")  # a child's writes count for its parent
            slot = f"{child}/" if child else ""
            per_run.setdefault(run_id, Counter())[f"{slot}{step_id}:{tool}"] += 1
    return per_run
