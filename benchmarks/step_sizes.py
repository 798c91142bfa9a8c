"""Per-step cost at three result sizes (trivial, ~2 KB, ~20 KB), beside a floor row
carrying the same payload and LangGraph's PostgresSaver.put of the same value, in
interleaved rounds on one Postgres server; plus redaction's time on adversarial
text from 10,000 to 100,000 characters (issue 11).

    .venv/bin/python -m benchmarks.step_sizes [--quick]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from typing import Any

from .common import libpq_url, setup_django, summary
from .step_overhead import LangGraph

STEPS = 100


def payload(size: int) -> Any:
    """A step result of about `size` bytes of canonical JSON, shaped like a tool's reply
    (records with ids, short fields and prose), with nothing secret in it."""
    if size <= 16:
        return 7
    items, text = [], "The quick brown fox jumps over the lazy dog near the river bank. "
    while len(json.dumps({"items": items}, separators=(",", ":"))) < size:
        n = len(items)
        items.append(
            {"id": f"A-{n:04d}", "cents": 1000 + n, "ok": True, "note": text[: 40 + n % 25]}
        )
    return {"items": items}


SIZES = {"trivial": payload(0), "2KB": payload(2_000), "20KB": payload(20_000)}


class Floor:
    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor_sized (run_id varchar(64) NOT NULL, "
            "position integer NOT NULL, step_id varchar(120) NOT NULL, kind varchar(10) NOT NULL,"
            " name varchar(100) NOT NULL, result jsonb, finished_at timestamptz NOT NULL, "
            "PRIMARY KEY (run_id, position))"
        )

    def round(self, value: Any) -> list[float]:
        run_id, times = uuid.uuid4().hex, []
        last = time.perf_counter()
        for position in range(STEPS):
            self.conn.execute(
                "INSERT INTO bench_floor_sized VALUES (%s, %s, %s, 'compute', 'payload', "
                "%s::jsonb, now())",
                [run_id, position, f"{position}-payload", json.dumps(value)],
            )
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times

    def close(self) -> None:
        self.conn.execute("DROP TABLE bench_floor_sized")
        self.conn.close()


class Engine:
    def __init__(self) -> None:
        from durableruns.engine import store

        self.store, self.original = store, store.commit_step
        self.finished: list[float] = []

        def timed(lease: Any, outcome: Any) -> None:
            self.original(lease, outcome)
            self.finished.append(time.perf_counter())

        store.commit_step = timed

    def round(self, value: Any) -> list[float]:
        from django.db.models.functions import Now

        from durableruns.engine import executor
        from durableruns.models import Run

        run = Run.objects.create(
            id=f"bench-{uuid.uuid4().hex}",
            agent="bench-payload",
            agent_version="1",
            input={"steps": STEPS, "payload": value},
            max_steps=100_000,
            max_duration_seconds=3600,
            rang_at=Now(),
        )
        self.finished = []
        started = time.perf_counter()
        if executor.advance(run.id) != "succeeded" or len(self.finished) != STEPS:
            raise RuntimeError("the engine round did not finish")
        return [b - a for a, b in zip([started, *self.finished], self.finished, strict=False)][1:]

    def close(self) -> None:
        self.store.commit_step = self.original


class SizedLangGraph(LangGraph):
    value: Any = None

    def round(self) -> list[float]:
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

        config: dict[str, Any] = {
            "configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}
        }
        checkpoint, times = empty_checkpoint(), []
        last = time.perf_counter()
        for position in range(STEPS):
            checkpoint = create_checkpoint(checkpoint, None, position)
            checkpoint["channel_values"] = {"payload": self.value}
            checkpoint["channel_versions"] = {"payload": position + 1}
            config = self.saver.put(
                config, checkpoint, {"source": "loop", "step": position}, {"payload": position + 1}
            )
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times


def _timed_cpu(cpu: list[float], fn: Any) -> list[float]:
    started = time.thread_time()
    times = fn()
    cpu.append((time.thread_time() - started) / STEPS)
    return times


def measure_steps(quick: bool) -> dict[str, Any]:
    url = setup_django("_sizes")
    rounds = 3 if quick else 8
    floor, engine = Floor(libpq_url(url)), Engine()
    try:
        langgraph: Any = SizedLangGraph()
    except Exception as exc:
        langgraph = f"not measured: {type(exc).__name__}: {exc}"
    results: dict[str, Any] = {}
    for label, value in SIZES.items():
        samples: dict[str, list[float]] = {"floor": [], "engine": [], "langgraph": []}
        cpu: dict[str, list[float]] = {name: [] for name in samples}
        engine.round(value)  # warm
        for _ in range(rounds):
            samples["floor"] += _timed_cpu(cpu["floor"], lambda v=value: floor.round(v))
            samples["engine"] += _timed_cpu(cpu["engine"], lambda v=value: engine.round(v))
            if not isinstance(langgraph, str):
                langgraph.value = value
                samples["langgraph"] += _timed_cpu(cpu["langgraph"], langgraph.round)
        floor_median = statistics.median(samples["floor"])
        results[label] = {
            "bytes": len(json.dumps(value, separators=(",", ":"))),
            **{
                name: {
                    **summary([v * 1000 for v in values]),
                    "ratio_to_floor": statistics.median(values) / floor_median,
                    "cpu_ms_per_step": statistics.median(cpu[name]) * 1000,
                }
                for name, values in samples.items()
                if values
            },
        }
    floor.close()
    engine.close()
    if not isinstance(langgraph, str):
        langgraph.close()
    return {
        "rounds": rounds,
        "steps_per_round": STEPS,
        "sizes": results,
        "langgraph": str(langgraph) if isinstance(langgraph, str) else "measured",
    }


ADVERSARIAL = {
    "a-": lambda n: "a-" * (n // 2),
    "x=": lambda n: "x=" * (n // 2),
    "-": lambda n: "-" * n,
    "near-match words": lambda n: ("passwor " * (n // 8)) + "password",
}


def measure_redaction() -> dict[str, dict[int, float]]:
    from durableruns.engine.redaction import redact_text

    out: dict[str, dict[int, float]] = {}
    for name, make in ADVERSARIAL.items():
        out[name] = {}
        for n in (10_000, 25_000, 50_000, 100_000):
            text = make(n)
            best = min(_once(redact_text, text) for _ in range(3))
            out[name][n] = best * 1000
    return out


def _once(fn: Any, text: str) -> float:
    started = time.perf_counter()
    fn(text)
    return time.perf_counter() - started


def main() -> None:
    quick = "--quick" in sys.argv
    steps = measure_steps(quick)
    print(f"per step, {steps['steps_per_round']} steps x {steps['rounds']} rounds")
    print(f"{'size':8} {'system':10} {'median ms':>10} {'p95 ms':>8} {'x floor':>8} {'CPU ms':>7}")
    for label, row in steps["sizes"].items():
        for name in ("floor", "engine", "langgraph"):
            if name in row:
                v = row[name]
                print(
                    f"{label:8} {name:10} {v['median']:10.3f} {v['p95']:8.3f} "
                    f"{v['ratio_to_floor']:8.2f} {v['cpu_ms_per_step']:7.3f}"
                )
    print("redaction, ms (best of 3) at 10k / 25k / 50k / 100k characters")
    for name, row in measure_redaction().items():
        print(f"{name:18} " + " / ".join(f"{ms:.2f}" for ms in row.values()))
    print(json.dumps(steps))


if __name__ == "__main__":
    main()
