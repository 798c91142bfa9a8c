"""durableruns' LangGraph saver beside LangGraph's AsyncPostgresSaver, same Postgres,
same process, interleaved: one `aput` of a checkpoint (a thread's first, which
for durableruns also creates the thread's Run, and a later one on an existing
thread, as a graph's steps are), and one `ainvoke` of a 20-node graph (22
checkpoints, 21 tasks' writes, one read)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, TypedDict

from .common import create_database, db_url, libpq_url, section_main, setup_django, summary


class Count(TypedDict):
    count: int


def _graph(checkpointer: Any, length: int = 20) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(Count)
    previous = START
    for i in range(length):
        builder.add_node(f"n{i}", lambda state: {"count": state["count"] + 1})
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder.compile(checkpointer=checkpointer)


async def _put_ms(saver: Any, parent: dict[str, Any] | None = None) -> tuple[float, Any]:
    """One aput: of a new thread's first checkpoint, or of the checkpoint after
    `parent` (a config aput returned). Returns the time and the new config."""
    from langgraph.checkpoint.base import empty_checkpoint

    config = parent or {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"count": 1, "messages": ["hello"] * 10}
    checkpoint["channel_versions"] = {"count": "1", "messages": "1"}
    version = saver.get_next_version(None, None)
    started = time.perf_counter()
    saved = await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, {"count": version})
    return (time.perf_counter() - started) * 1000, saved


async def _graph_ms(graph: Any) -> float:
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    started = time.perf_counter()
    result = await graph.ainvoke({"count": 0}, config)
    assert result["count"] == 20
    return (time.perf_counter() - started) * 1000


async def _measure(quick: bool) -> dict[str, Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from durableruns.langgraph import AsyncDurableRunsSaver

    puts, graphs = (200, 20) if quick else (2000, 200)
    async with AsyncPostgresSaver.from_conn_string(libpq_url(db_url("_langgraph_pg"))) as pg:
        await pg.setup()
        savers = {"durableruns": AsyncDurableRunsSaver(), "AsyncPostgresSaver": pg}
        compiled = {name: _graph(s) for name, s in savers.items()}
        kinds = ("put", "put_existing", "graph")
        timings: dict[str, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in savers}
        threads: dict[str, Any] = {}
        for name in savers:  # warm-up: connections, prepared statements, imports
            for _ in range(5):
                _, threads[name] = await _put_ms(savers[name], threads.get(name))
                await _put_ms(savers[name])
                await _graph_ms(compiled[name])
        for _ in range(puts):
            for name, saver in savers.items():
                timings[name]["put"].append((await _put_ms(saver))[0])
                took, threads[name] = await _put_ms(saver, threads[name])
                timings[name]["put_existing"].append(took)
        for _ in range(graphs):
            for name, graph in compiled.items():
                timings[name]["graph"].append(await _graph_ms(graph))
    return {
        "systems": {
            name: {
                "put_ms": summary(t["put"]),
                "put_existing_thread_ms": summary(t["put_existing"]),
                "graph_20_nodes_ms": summary(t["graph"]),
            }
            for name, t in timings.items()
        }
    }


def measure(quick: bool) -> dict[str, Any]:
    create_database(db_url("_langgraph_pg").rsplit("/", 1)[1], fresh=True)
    setup_django("_langgraph", fresh=True)
    started = time.perf_counter()
    result = asyncio.run(_measure(quick))
    result["elapsed_s"] = time.perf_counter() - started
    return result


if __name__ == "__main__":
    section_main(measure)
