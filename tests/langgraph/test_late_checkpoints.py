"""LangGraph stores checkpoints in the background (durability "async"): a step's
tasks run while the checkpoints before them are still being written, so a task's
interrupt (or error) can reach the database before the checkpoints of earlier steps.
Those late checkpoints must not move the thread back to running.

Seen as a flake in CI (test_it_stops_at_an_interrupt_and_resumes_with_a_command,
test_it_lists_a_thread_as_an_interrupted_langgraph_run: "running" instead of
"awaiting_approval") on a busy worker; here the order is forced."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import ERROR, INTERRUPT
from langgraph.graph import START, StateGraph
from langgraph.types import Command

from durableruns.langgraph import AsyncDurableRunsSaver, DurableRunsSaver
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from tests.langgraph.graphs import refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


class _Late:
    """Holds every checkpoint back until a task's interrupt or error is stored, then
    stores them in order: what a busy LangGraph background executor can do."""

    def _hold(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        self.held.append((config, checkpoint, metadata, versions))
        return self._checkpoint_rows(config, checkpoint, metadata, versions)[0]

    def _closes_a_step(self, writes: Any) -> bool:
        return any(channel in (INTERRUPT, ERROR) for channel, _ in writes)


class LateSaver(_Late, DurableRunsSaver):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held: list[Any] = []
        self.late = True

    def put(self, config, checkpoint, metadata, new_versions):
        if not self.late:
            return super().put(config, checkpoint, metadata, new_versions)
        return self._hold(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        super().put_writes(config, writes, task_id, task_path)
        if self._closes_a_step(writes):
            held, self.held, self.late = self.held, [], False
            for args in held:
                super().put(*args)


class AsyncLateSaver(_Late, AsyncDurableRunsSaver):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.held: list[Any] = []
        self.late = True

    async def aput(self, config, checkpoint, metadata, new_versions):
        if not self.late:
            return await super().aput(config, checkpoint, metadata, new_versions)
        return self._hold(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes, task_id, task_path=""):
        await super().aput_writes(config, writes, task_id, task_path)
        if self._closes_a_step(writes):
            held, self.held, self.late = self.held, [], False
            for args in held:
                await super().aput(*args)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def test_checkpoints_stored_after_the_interrupt_keep_the_thread_awaiting_approval():
    saver = LateSaver()
    graph = refund_builder().compile(checkpointer=saver)

    first = graph.invoke({"order": "A-1"}, _config("late-1"))

    assert first["__interrupt__"][0].value["payload"] == {"order": "A-1", "cents": 5000}
    assert not saver.held  # every checkpoint was stored, after the interrupt
    run = Run.objects.get(pk=run_id_for("late-1"))
    assert run.status == "awaiting_approval"
    assert Approval.objects.filter(run=run, state="pending").count() == 1
    final = graph.invoke(Command(resume={"decision": "approve"}), _config("late-1"))
    assert final["log"] == ["lookup", "ask_human", "paid"]
    run.refresh_from_db()
    assert run.status == "succeeded"


def test_async_checkpoints_stored_after_the_interrupt_keep_the_thread_awaiting_approval():
    import asyncio

    saver = AsyncLateSaver()
    graph = refund_builder().compile(checkpointer=saver)

    asyncio.run(graph.ainvoke({"order": "A-2"}, _config("late-2")))

    assert not saver.held
    assert Run.objects.get(pk=run_id_for("late-2")).status == "awaiting_approval"


@pytest.mark.parametrize("saver_class", [LateSaver, AsyncLateSaver])
def test_a_thread_whose_writes_come_before_its_first_checkpoint_keeps_its_graph(saver_class):
    """The writes create the thread's Run: it must name the graph, or no worker would
    ever resume it (seen in CI: "waiting for a worker that has LangGraph graph
    'langgraph'" after a reviewer approved the interrupt)."""
    import asyncio

    graph = refund_builder().compile(checkpointer=saver_class(graph="refund"))
    if saver_class is LateSaver:
        graph.invoke({"order": "A-4"}, _config("late-4"))
    else:
        asyncio.run(graph.ainvoke({"order": "A-4"}, _config("late-4")))

    run = Run.objects.get(pk=run_id_for("late-4"))
    assert (run.agent, run.status) == ("refund", "awaiting_approval")


def _failing_builder() -> StateGraph:

    from typing import TypedDict

    class Chain(TypedDict, total=False):
        log: list[str]

    def first(state: Chain) -> Chain:
        return {"log": ["first"]}

    def broken(state: Chain) -> Chain:
        raise RuntimeError("broken node")

    builder = StateGraph(Chain)
    builder.add_node("first", first)
    builder.add_node("broken", broken)
    builder.add_edge(START, "first")
    builder.add_edge("first", "broken")
    return builder


def test_checkpoints_stored_after_a_tasks_error_keep_the_thread_failed():
    saver = LateSaver()
    graph = _failing_builder().compile(checkpointer=saver)

    with pytest.raises(RuntimeError, match="broken node"):
        graph.invoke({"log": []}, _config("late-3"))

    assert not saver.held
    assert Run.objects.get(pk=run_id_for("late-3")).status == "failed"
