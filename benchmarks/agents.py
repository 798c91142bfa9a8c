"""Agents and a tool that exist only for the benchmarks.

Workers load this module through DURABLERUNS_AGENT_MODULES, like any user's agents.
The effect is an idempotent write to a local table keyed by the idempotency key,
so a benchmark measures the engine and the ledger, not an HTTP stand-in.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import connection

import durableruns as dr

SINK_TABLE = "bench_effect_sink"


def create_sink() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {SINK_TABLE} "
            "(idempotency_key text PRIMARY KEY, run_id text NOT NULL, "
            "written_at timestamptz NOT NULL DEFAULT now())"
        )


def _noop(i: int) -> int:
    return i


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def bench_sink(run_id: str, *, idempotency_key: str) -> dict:
    """Write once per key, like a provider that deduplicates by Idempotency-Key."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {SINK_TABLE} (idempotency_key, run_id) VALUES (%s, %s) "  # noqa: S608
            "ON CONFLICT (idempotency_key) DO NOTHING",
            [idempotency_key, run_id],
        )
    return {"written": idempotency_key}


@dr.agent("bench-trivial", version="1", max_steps=100_000, max_duration=timedelta(hours=1))
def bench_trivial(run: dr.Run, task: dict) -> dict:
    """`steps` trivial compute steps: what a checkpoint costs and nothing else."""
    for i in range(int(task["steps"])):
        run.step("noop", _noop, i)
    return {"steps": int(task["steps"])}


@dr.agent("bench-payload", version="1", max_steps=100_000, max_duration=timedelta(hours=1))
def bench_payload(run: dr.Run, task: dict) -> dict:
    """`steps` compute steps, each returning `payload`: a checkpoint of that size."""
    payload = task["payload"]
    for _ in range(int(task["steps"])):
        run.step("payload", lambda: payload)
    return {"steps": int(task["steps"])}


@dr.agent("bench-effect", version="1", max_steps=1_000, max_duration=timedelta(hours=1))
def bench_effect(run: dr.Run, task: dict) -> dict:
    """`steps` steps in all: trivial compute steps, then one effect through the ledger."""
    for i in range(int(task["steps"]) - 1):
        run.step("noop", _noop, i)
    run.call(bench_sink, run_id=run.id)
    return {"steps": int(task["steps"])}


@dr.agent("bench-ticker", version="1", max_steps=1_000_000, max_duration=timedelta(hours=2))
def bench_ticker(run: dr.Run, task: dict) -> dict:
    """A long run of short sleeping steps, for the recovery benchmark to kill under."""
    for i in range(int(task["ticks"])):
        run.step("tick", _tick, i, float(task["seconds"]))
    return {"ticks": int(task["ticks"])}


def _tick(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i


@dr.agent("bench-approval", version="1", max_steps=10, max_duration=timedelta(hours=1))
def bench_approval(run: dr.Run, task: dict) -> dict:
    """A step, an approval gate, and the step whose start the approval benchmark times."""
    run.step("before", _noop, 0)
    decision = run.approval("go", summary="benchmark gate", payload={"n": 1})
    run.step("after", _noop, 1)
    return {"approved": decision.approved}


@dr.agent("bench-waiter", version="1", max_steps=1_000, max_duration=timedelta(hours=1))
def bench_waiter(run: dr.Run, task: dict) -> dict:
    """`waits` steps that each wait `seconds` and use no CPU: a run waiting on a model."""
    for i in range(int(task["waits"])):
        run.step(f"wait-{i}", time.sleep, float(task["seconds"]))
    return {"waits": int(task["waits"])}
