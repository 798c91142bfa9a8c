"""Per-step checkpoint overhead: the engine, the floor and the peers, in one process.

Every system runs 100 trivial steps per round, on the same Postgres server, in
interleaved rounds (floor, engine, DBOS, LangGraph, then again), so drift from the
other work on a shared machine falls on all of them alike. A step's time is the
interval between consecutive step completions, as the next step would see it.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from .common import db_url, libpq_url, section_main, setup_django, summary

STEPS = 100


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django()
    rounds = 3 if quick else 10
    floor = Floor(libpq_url(url))
    fenced = FencedFloor(libpq_url(url))
    engine = Engine()
    peers: dict[str, Any] = {}
    for name, factory in (("dbos", Dbos), ("langgraph", LangGraph)):
        try:
            peers[name] = factory()
        except Exception as exc:  # a missing optional peer is reported, not fatal
            peers[name] = f"not measured: {type(exc).__name__}: {exc}"
    samples: dict[str, list[float]] = {
        "floor": [],
        "floor_transaction": [],
        "floor_fenced": [],
        "engine": [],
        "engine_commit": [],
    }
    for name in peers:
        samples[name] = []
    cpu: dict[str, list[float]] = {name: [] for name in samples}
    for _ in range(rounds):
        samples["floor"] += _cpu(cpu["floor"], lambda: floor.round(autocommit=True))
        samples["floor_transaction"] += _cpu(
            cpu["floor_transaction"], lambda: floor.round(autocommit=False)
        )
        samples["floor_fenced"] += _cpu(cpu["floor_fenced"], fenced.round)
        per_step, commits = _cpu(cpu["engine"], engine.round)
        samples["engine"] += per_step
        samples["engine_commit"] += commits
        for name, peer in peers.items():
            if not isinstance(peer, str):
                samples[name] += _cpu(cpu[name], peer.round)
    floor.close()
    fenced.close()
    for peer in peers.values():
        if not isinstance(peer, str):
            peer.close()
    result: dict[str, Any] = {"steps_per_round": STEPS, "rounds": rounds, "systems": {}}
    floor_median = summary(samples["floor"])["median"]
    for name, values in samples.items():
        if values:
            stats = summary([v * 1000 for v in values])
            stats["ratio_to_floor"] = stats["median"] / (floor_median * 1000)
            if cpu[name]:
                stats["cpu_ms_per_step"] = statistics.median(cpu[name]) * 1000
            result["systems"][name] = stats
    result["peers_not_measured"] = {k: v for k, v in peers.items() if isinstance(v, str)}
    return result


def _cpu(sink: list[float], round_: Callable[[], Any]) -> Any:
    """Run one round; append the calling thread's CPU seconds per step to `sink`.

    CPU time does not wait for the disk or for other processes, so it shows the
    client-side cost of each system even when a busy machine inflates wall time.
    """
    started = time.thread_time()
    value = round_()
    sink.append((time.thread_time() - started) / STEPS)
    return value


class Floor:
    """One INSERT of a row shaped like a step checkpoint, plus COMMIT, on one connection.

    The floor is the INSERT in autocommit: one round trip and one commit, which is
    the least any durable checkpoint can cost. `floor_transaction` is the same row
    with an explicit transaction (psycopg sends BEGIN, INSERT, COMMIT: three round
    trips), printed for comparison with the way most ORMs write.
    """

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (run_id varchar(64) NOT NULL, "
            "position integer NOT NULL, step_id varchar(120) NOT NULL, kind varchar(10) NOT NULL,"
            " name varchar(100) NOT NULL, input jsonb, result jsonb, "
            "finished_at timestamptz NOT NULL, PRIMARY KEY (run_id, position))"
        )
        self.conn.commit()

    def round(self, *, autocommit: bool) -> list[float]:
        self.conn.autocommit = autocommit
        run_id = uuid.uuid4().hex
        times = []
        last = time.perf_counter()
        for position in range(STEPS):
            self.conn.execute(
                "INSERT INTO bench_floor (run_id, position, step_id, kind, name, input, result, "
                "finished_at) VALUES (%s, %s, %s, 'compute', 'noop', NULL, %s::jsonb, now())",
                [run_id, position, f"{position}-noop", json.dumps(position)],
            )
            if not autocommit:
                self.conn.commit()
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times

    def close(self) -> None:
        self.conn.autocommit = True
        self.conn.execute("TRUNCATE bench_floor")
        self.conn.close()


class FencedFloor:
    """The engine's own checkpoint statement, sent bare from psycopg (prepared, autocommit).

    The step row plus the fence check on the run row (`INSERT ... SELECT ... FOR
    SHARE`), without any of the engine's Python: the gap between this and the floor
    is what the fence costs in the database, the gap between the engine and this is
    the engine's client-side work.
    """

    def __init__(self, url: str) -> None:
        import psycopg
        from django.db.models.functions import Now

        from durableruns.engine import store
        from durableruns.models import Run

        self.run = Run.objects.create(
            id=f"bench-fenced-{uuid.uuid4().hex}",
            agent="bench-trivial",
            agent_version="1",
            input={},
            max_steps=100_000,
            max_duration_seconds=3600,
            rang_at=Now(),
            lease_owner="bench-floor",
            fence=1,
        )
        self.sql = (
            f"INSERT INTO durableruns_step ({store._STEP_COLUMNS}) "
            "SELECT id, %s, %s, 'compute', 'noop', '', %s, NULL, %s::jsonb, NULL, '', 1, now(), "
            f"now(), 1, NULL, leases_taken, lease_owner, NULL {store._fence_guard()} FOR SHARE"
        )
        self.conn = psycopg.connect(url, autocommit=True)
        self.position = 0

    def insert(self, result_text: str | None = None) -> None:
        """One fenced step row; its result is the position unless `result_text` is given."""
        position = self.position
        self.position += 1
        cursor = self.conn.execute(
            self.sql,
            [
                position,
                f"{position}-noop",
                "0123456789abcdef",
                json.dumps(position) if result_text is None else result_text,
                self.run.id,
                1,
                "bench-floor",
            ],
            prepare=True,
        )
        if cursor.rowcount != 1:
            raise RuntimeError("the fenced floor's fence check failed")

    def round(self) -> list[float]:
        times = []
        last = time.perf_counter()
        for _ in range(STEPS):
            self.insert()
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times

    def close(self) -> None:
        self.conn.close()
        self.run.delete()


class Engine:
    """The real executor, in-process: durableruns.engine.executor.advance on a 100-step run."""

    def __init__(self) -> None:
        from durableruns.engine import store

        self.store = store
        self.original_commit = store.commit_step
        self.finished: list[float] = []
        self.commits: list[float] = []

        def timed_commit(lease: Any, outcome: Any) -> None:
            started = time.perf_counter()
            self.original_commit(lease, outcome)
            now = time.perf_counter()
            self.commits.append(now - started)
            self.finished.append(now)

        store.commit_step = timed_commit
        self.round()  # warm up the connection, the registry and the query paths

    def round(self) -> tuple[list[float], list[float]]:
        from django.db.models.functions import Now

        from durableruns.engine import executor
        from durableruns.models import Run

        run = Run.objects.create(
            id=f"bench-{uuid.uuid4().hex}",
            agent="bench-trivial",
            agent_version="1",
            input={"steps": STEPS},
            max_steps=100_000,
            max_duration_seconds=3600,
            rang_at=Now(),
        )
        self.finished, self.commits = [], []
        started = time.perf_counter()
        outcome = executor.advance(run.id)
        if outcome != "succeeded" or len(self.commits) != STEPS:
            raise RuntimeError(f"engine round ended {outcome!r} after {len(self.commits)} steps")
        # The first interval runs from advance() to the first checkpoint: it includes
        # taking the lease and loading history, which is per task, not per step.
        intervals = [b - a for a, b in zip([started, *self.finished], self.finished, strict=False)]
        return intervals[1:], self.commits[1:]

    def close(self) -> None:
        self.store.commit_step = self.original_commit


class Dbos:
    """DBOS Transact: a workflow of 100 @DBOS.step() calls, checkpointed in its system DB."""

    def __init__(self) -> None:
        from dbos import DBOS, DBOSConfig

        from .common import create_database

        create_database(f"{db_url('_dbos').rsplit('/', 1)[1]}")
        config: DBOSConfig = {
            "name": "durableruns-bench",
            "system_database_url": libpq_url(db_url("_dbos")),
            "log_level": "WARNING",
            "run_admin_server": False,
        }
        DBOS(config=config)
        self.times: list[float] = []

        @DBOS.step()
        def noop(i: int) -> int:
            return i

        @DBOS.workflow()
        def hundred_steps() -> list[float]:
            finished = [time.perf_counter()]
            for i in range(STEPS):
                noop(i)
                finished.append(time.perf_counter())
            return [b - a for a, b in itertools.pairwise(finished)]

        self.workflow = hundred_steps
        self.dbos = DBOS
        DBOS.launch()
        self.round()  # warm up

    def round(self) -> list[float]:
        from dbos import SetWorkflowID

        with SetWorkflowID(f"bench-{uuid.uuid4().hex}"):
            intervals = self.workflow()
        # The first step pays for the workflow's own start record: not per step.
        return intervals[1:]

    def close(self) -> None:
        self.dbos.destroy()


class LangGraph:
    """LangGraph's PostgresSaver.put() of a checkpoint carrying one step's result."""

    def __init__(self) -> None:
        from langgraph.checkpoint.postgres import PostgresSaver

        from .common import create_database

        create_database(f"{db_url('_langgraph').rsplit('/', 1)[1]}")
        self._cm = PostgresSaver.from_conn_string(libpq_url(db_url("_langgraph")))
        self.saver = self._cm.__enter__()
        self.saver.setup()
        self.round()  # warm up

    def round(self) -> list[float]:
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

        thread = uuid.uuid4().hex
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        times = []
        last = time.perf_counter()
        for position in range(STEPS):
            checkpoint = create_checkpoint(checkpoint, None, position)
            checkpoint["channel_values"] = {"noop": position}
            checkpoint["channel_versions"] = {"noop": position + 1}
            config = self.saver.put(
                config, checkpoint, {"source": "loop", "step": position}, {"noop": position + 1}
            )
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


if __name__ == "__main__":
    section_main(measure)
