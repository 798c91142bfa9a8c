"""Real LangGraph graphs on the durableruns savers: the faults the conformance suite
misses (concurrent writes, re-sent writes, fork branches), subgraphs, parallel
branches, several interrupts on one checkpoint, and the thread as a run."""

from __future__ import annotations

import asyncio
import operator
import uuid
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from durableruns.engine import store as engine_store
from durableruns.engine.runs import ring_due
from durableruns.langgraph import AsyncDurableRunsSaver, DurableRunsSaver, ThreadClosed
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, LangGraphCheckpoint, LangGraphWrite, Run
from tests.langgraph.graphs import chain_builder, fan_builder, refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


def _config(thread_id: str, **extra) -> dict:
    return {"configurable": {"thread_id": thread_id, **extra}}


def _arun(coro):
    return asyncio.run(coro)


def test_it_stops_at_an_interrupt_and_resumes_with_a_command():
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    config = _config("order-1")

    first = graph.invoke({"order": "A-1"}, config)

    run = Run.objects.get(pk=run_id_for("order-1"))
    assert first["__interrupt__"][0].value["payload"] == {"order": "A-1", "cents": 5000}
    assert (run.kind, run.status) == ("langgraph", "awaiting_approval")
    final = graph.invoke(Command(resume={"decision": "approve"}), config)
    assert final["log"] == ["lookup", "ask_human", "paid"]
    run.refresh_from_db()
    assert run.status == "succeeded"  # shown as "idle": the graph has nothing left to run


def test_async_parallel_branches_write_concurrently_on_many_threads():
    graph = fan_builder(width=8).compile(checkpointer=AsyncDurableRunsSaver())

    async def many():
        return await asyncio.gather(
            *(graph.ainvoke({"seen": []}, _config(f"fan-{i}")) for i in range(6))
        )

    results = _arun(many())

    for result in results:
        assert sorted(result["seen"]) == sorted([*(f"b{i}" for i in range(8)), "done"])
    assert Run.objects.filter(kind="langgraph", status="succeeded").count() == 6


def test_a_re_sent_write_is_an_upsert_not_an_error():
    saver = DurableRunsSaver()
    graph = chain_builder(2).compile(checkpointer=saver)
    graph.invoke({"count": 0}, _config("resent"))
    config = saver.get_tuple(_config("resent")).config
    task = str(uuid.uuid4())

    saver.put_writes(config, [("count", 1), ("__error__", "first")], task)
    saver.put_writes(config, [("count", 2), ("__error__", "second")], task)

    writes = saver.get_tuple(config).pending_writes
    assert sorted((c, v) for _, c, v in writes) == [("__error__", "second"), ("count", 1)]


def test_fork_branches_keep_their_own_values():
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    config = _config("forked")
    graph.invoke({"order": "F-1", "cents": 50}, config)
    before_ask = next(s for s in graph.get_state_history(config) if s.next == ("ask_human",)).config

    seven = graph.update_state(before_ask, {"cents": 7})
    nine = graph.update_state(before_ask, {"cents": 9})

    assert graph.get_state(seven).values["cents"] == 7
    assert graph.get_state(nine).values["cents"] == 9
    graph.invoke(None, seven)  # runs the branch up to its own interrupt
    resumed = graph.invoke(Command(resume={"decision": "approve"}), config)
    assert resumed["cents"] == 7
    assert graph.get_state(nine).values["cents"] == 9


def test_a_subgraph_interrupt_stops_the_thread_and_resumes():
    child = refund_builder().compile()

    class Outer(TypedDict, total=False):
        order: str
        cents: int
        decision: dict
        log: Annotated[list[str], operator.add]

    builder = StateGraph(Outer)
    builder.add_node("refund", child)
    builder.add_node("after", lambda s: {"log": ["after"]})
    builder.add_edge(START, "refund")
    builder.add_edge("refund", "after")
    builder.add_edge("after", END)
    graph = builder.compile(checkpointer=DurableRunsSaver())
    config = _config("nested")

    graph.invoke({"order": "S-1"}, config)

    assert Run.objects.get(pk=run_id_for("nested")).status == "awaiting_approval"
    namespaces = set(LangGraphCheckpoint.objects.values_list("checkpoint_ns", flat=True))
    assert "" in namespaces and any(ns.startswith("refund:") for ns in namespaces)
    # The interrupt is recorded in both namespaces; the inbox shows it once.
    assert Approval.objects.filter(run_id=run_id_for("nested")).count() == 1
    final = graph.invoke(Command(resume={"decision": "reject"}), config)
    assert final["log"] == ["lookup", "ask_human", "not paid", "after"]


def test_two_interrupts_on_one_checkpoint_resume_together():
    graph = fan_builder(width=2, ask=True).compile(checkpointer=DurableRunsSaver())
    config = _config("two-questions")

    first = graph.invoke({"seen": []}, config)

    pending = first["__interrupt__"]
    assert sorted(i.value["payload"]["branch"] for i in pending) == ["b0", "b1"]
    final = graph.invoke(
        Command(resume={i.id: f"yes-{i.value['payload']['branch']}" for i in pending}), config
    )
    assert sorted(final["answers"]) == ["b0=yes-b0", "b1=yes-b1"]


@pytest.mark.parametrize(
    "thread_id",
    ["nul\x00inside", "lone \ud800 surrogate", "x" * 100_000, "", "'; DROP TABLE x; --"],
)
def test_any_string_is_a_thread_id(thread_id):
    graph = chain_builder(3).compile(checkpointer=DurableRunsSaver())

    assert graph.invoke({"count": 0}, _config(thread_id))["count"] == 3

    assert graph.get_state(_config(thread_id)).values == {"count": 3}
    run = Run.objects.get(pk=run_id_for(thread_id))
    assert run.langgraph_thread.thread_id == thread_id


def test_a_cancelled_thread_refuses_further_checkpoints():
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    config = _config("cancel-me")
    graph.invoke({"order": "C-1"}, config)
    Run.objects.filter(pk=run_id_for("cancel-me")).update(status="cancelled")
    count = LangGraphCheckpoint.objects.count()

    with pytest.raises(ThreadClosed, match="cancelled"):
        graph.invoke(Command(resume={"decision": "approve"}), config)

    assert LangGraphCheckpoint.objects.count() == count
    assert not LangGraphWrite.objects.filter(channel="__resume__").exists()


def test_the_executor_and_the_sweeper_leave_langgraph_runs_alone():
    graph = chain_builder(2).compile(checkpointer=DurableRunsSaver())
    graph.invoke({"count": 0}, _config("hands-off"))
    Run.objects.filter(pk=run_id_for("hands-off")).update(status="running")

    assert engine_store.acquire_lease(run_id_for("hands-off"), "worker-1") is None
    assert ring_due() == 0


def test_an_interrupt_leaves_no_database_connection_on_langgraphs_threads():
    """An interrupt's payload is redacted with the admins' rules, read from the database
    on a cache miss: on the saver thread, not on LangGraph's pool thread that called
    put_writes (whose connection stayed open after the invocation: the teardown's
    'database is being accessed by other users')."""
    from django.db import connection

    from durableruns import secret_text
    from durableruns.langgraph.saver import close_connection

    def sessions() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
            return cursor.fetchone()[0]

    if connection.vendor != "postgresql":
        pytest.skip("counts Postgres sessions")
    close_connection()
    before = sessions()  # this test's own (and any another test left behind)
    secret_text.rules_changed()  # the next redaction reads the rules from the database
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())

    graph.invoke({"order": "C-1"}, _config("no-leak"))
    close_connection()

    assert Run.objects.get(pk=run_id_for("no-leak")).status == "awaiting_approval"
    assert sessions() == before


@pytest.mark.parametrize("remembered", ["running", "awaiting_approval", "succeeded", "failed", ""])
def test_a_thread_this_process_remembers_but_the_database_lost_starts_again(remembered):
    """The savers remember the threads this process checkpointed (sql._known, a hint):
    a thread deleted since (retention, or the previous test's flush) with any status
    remembered starts again as a new thread and reaches its interrupt."""
    from durableruns.langgraph import sql

    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    run_id = run_id_for("forgotten")
    graph.invoke({"order": "F-1"}, _config("forgotten"))
    Run.objects.filter(pk=run_id).delete()
    if connection_is_postgres():
        assert run_id in sql._known
        sql._known[run_id] = remembered

    first = graph.invoke({"order": "F-2"}, _config("forgotten"))

    assert first["__interrupt__"][0].value["payload"] == {"order": "F-2", "cents": 5000}
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"
    graph.invoke(Command(resume={"decision": "approve"}), _config("forgotten"))
    assert Run.objects.get(pk=run_id).status == "succeeded"


def connection_is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def test_the_async_saver_redacts_an_interrupts_payload_with_the_admins_rules():
    """Made on the event loop, the approval's payload was redacted without the admins'
    rules whenever they were not cached (Django refuses a query there)."""
    from durableruns.models import RedactionRule

    RedactionRule.objects.create(kind="key", value="order")  # and the rules' caches cleared
    graph = refund_builder().compile(checkpointer=AsyncDurableRunsSaver())

    _arun(graph.ainvoke({"order": "SECRET-ORDER"}, _config("redacted-async")))

    payload = Approval.objects.get(run_id=run_id_for("redacted-async")).payload
    assert "SECRET-ORDER" not in str(payload)
    assert payload["cents"] == 5000
