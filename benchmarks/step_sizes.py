"""Per-step cost at three result sizes (trivial, ~2 KB, ~20 KB), beside a floor row
carrying the same payload and LangGraph's PostgresSaver.put of the same value, in
interleaved rounds on one Postgres server; plus redaction's time on adversarial
text from 10,000 to 100,000 characters (issue 11).

    .venv/bin/python -m benchmarks.step_sizes [--quick] [--json FILE]

Every system is timed the same way: a step's time is the interval between
consecutive step completions (the first step of a round is left out: for the engine
it includes taking the lease and loading history, which are per task), and its
client CPU is the calling thread's CPU time over those same intervals. The floor
serialises the payload with orjson, the fastest correct serialiser at hand, so it is
the least a checkpoint carrying that payload can cost.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from typing import Any

import orjson

from .common import libpq_url, section_main, setup_django, summary
from .step_overhead import FencedFloor, LangGraph

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


class Stamps:
    """Wall and thread-CPU clocks read at the end of each step of a round."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def take(self) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.thread_time())

    def intervals(self) -> list[float]:
        """Seconds per step from the second step on."""
        return [b - a for a, b in zip(self.wall, self.wall[1:], strict=False)]

    def cpu_per_step(self) -> float:
        return (self.cpu[-1] - self.cpu[0]) / (len(self.cpu) - 1)


class Floor:
    """A step-shaped row carrying the payload. Its `result` column is compressed as the
    engine's step table's is (LZ4 since migration 0011), unless `compression` says
    otherwise ("default": the server's, pglz, as every floor before 0011)."""

    def __init__(self, url: str, table: str = "bench_floor_sized", compression: str = "") -> None:
        import psycopg
        import psycopg.sql

        self.conn = psycopg.connect(url, autocommit=True)
        self.table = table
        compression = compression or _step_result_compression(self.conn)
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (run_id varchar(64) NOT NULL, "
            "position integer NOT NULL, step_id varchar(120) NOT NULL, kind varchar(10) NOT NULL,"
            " name varchar(100) NOT NULL, result jsonb, finished_at timestamptz NOT NULL, "
            "PRIMARY KEY (run_id, position))"
        )
        self.conn.execute(f"ALTER TABLE {table} ALTER COLUMN result SET COMPRESSION {compression}")
        self.insert = psycopg.sql.SQL(
            "INSERT INTO {} VALUES (%s, %s, %s, 'compute', 'payload', %s::jsonb, now())"
        ).format(psycopg.sql.Identifier(table))

    def round(self, value: Any) -> Stamps:
        run_id, stamps = uuid.uuid4().hex, Stamps()
        for position in range(STEPS):
            self.conn.execute(
                self.insert,
                [run_id, position, f"{position}-payload", orjson.dumps(value).decode()],
            )
            stamps.take()
        return stamps

    def close(self) -> None:
        self.conn.execute(f"DROP TABLE {self.table}")
        self.conn.close()


def _step_result_compression(conn: Any) -> str:
    method = conn.execute(
        "SELECT attcompression FROM pg_attribute "
        "WHERE attrelid = 'durableruns_step'::regclass AND attname = 'result'"
    ).fetchone()
    return {"l": "lz4", "p": "pglz"}.get(method[0] if method else "", "default")


class SizedFencedFloor(FencedFloor):
    """The engine's own fenced `INSERT ... SELECT ... FOR SHARE` with the payload, sent
    bare from psycopg: what the fence costs in the database, without the engine's Python."""

    def round(self, value: Any) -> Stamps:  # type: ignore[override]
        stamps, text = Stamps(), orjson.dumps(value).decode()
        for _ in range(STEPS):
            self.insert(text)
            stamps.take()
        return stamps


class Engine:
    def __init__(self) -> None:
        from durableruns.engine import store

        self.store, self.original = store, store.commit_step
        self.stamps = Stamps()

        def timed(lease: Any, outcome: Any) -> None:
            self.original(lease, outcome)
            self.stamps.take()

        store.commit_step = timed

    def round(self, value: Any) -> Stamps:
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
        self.stamps = Stamps()
        if executor.advance(run.id) != "succeeded" or len(self.stamps.wall) != STEPS:
            raise RuntimeError("the engine round did not finish")
        return self.stamps

    def close(self) -> None:
        self.store.commit_step = self.original


class SizedLangGraph(LangGraph):
    value: Any = None

    def round(self) -> Stamps:  # type: ignore[override]
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

        config: dict[str, Any] = {
            "configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}
        }
        checkpoint, stamps = empty_checkpoint(), Stamps()
        for position in range(STEPS):
            checkpoint = create_checkpoint(checkpoint, None, position)
            checkpoint["channel_values"] = {"payload": self.value}
            checkpoint["channel_versions"] = {"payload": position + 1}
            config = self.saver.put(
                config, checkpoint, {"source": "loop", "step": position}, {"payload": position + 1}
            )
            stamps.take()
        return stamps


def _record(samples: list[float], cpu: list[float], stamps: Stamps) -> None:
    samples += stamps.intervals()
    cpu.append(stamps.cpu_per_step())


def measure_steps(quick: bool) -> dict[str, Any]:
    url = setup_django("_sizes")
    rounds = 3 if quick else 8
    floor, engine = Floor(libpq_url(url)), Engine()
    floor_default = Floor(libpq_url(url), "bench_floor_default", "default")
    fenced = SizedFencedFloor(libpq_url(url))
    try:
        langgraph: Any = SizedLangGraph()
    except Exception as exc:
        langgraph = f"not measured: {type(exc).__name__}: {exc}"
    results: dict[str, Any] = {}
    for label, value in SIZES.items():
        samples: dict[str, list[float]] = {
            "floor": [],
            "floor_default": [],
            "floor_fenced": [],
            "engine": [],
            "langgraph": [],
        }
        cpu: dict[str, list[float]] = {name: [] for name in samples}
        engine.round(value)  # warm
        for _ in range(rounds):
            _record(samples["floor"], cpu["floor"], floor.round(value))
            _record(samples["floor_default"], cpu["floor_default"], floor_default.round(value))
            _record(samples["floor_fenced"], cpu["floor_fenced"], fenced.round(value))
            _record(samples["engine"], cpu["engine"], engine.round(value))
            if not isinstance(langgraph, str):
                langgraph.value = value
                _record(samples["langgraph"], cpu["langgraph"], langgraph.round())
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
    floor_default.close()
    fenced.close()
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
    # The AWS id/secret pair rule: every id opens a 100-character window.
    "aws key ids": lambda n: "AKIAIOSFODNN7EXAMPLE " * (n // 21),
    "aws near-miss secrets": lambda n: ("AKIAIOSFODNN7EXAMPLE " + "a" * 39 + " ") * (n // 61),
    "near-match key": lambda n: "api_ke" * (n // 6),
    "long word, then a key": lambda n: "a" * (n - 9) + "password=",
}
REDACTION_LENGTHS = (10_000, 25_000, 50_000, 100_000, 1_000_000)


def measure_redaction() -> dict[str, dict[str, float]]:
    """Milliseconds (best of 3) per adversarial text and length."""
    from durableruns.engine.redaction import redact_text

    out: dict[str, dict[str, float]] = {}
    for name, make in ADVERSARIAL.items():
        out[name] = {}
        for n in REDACTION_LENGTHS:
            text = make(n)
            out[name][str(n)] = min(_once(redact_text, text) for _ in range(3)) * 1000
    return out


def _once(fn: Any, text: str) -> float:
    started = time.perf_counter()
    fn(text)
    return time.perf_counter() - started


def measure(quick: bool) -> dict[str, Any]:
    return {**measure_steps(quick), "redaction_ms": measure_redaction()}


if __name__ == "__main__":
    section_main(measure)
