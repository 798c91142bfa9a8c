"""A LangGraph thread resumed by a real worker after a reviewer's decision, and
continued from its last checkpoint when that worker is SIGKILLed mid-resume."""

from __future__ import annotations

import pytest

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from durableruns.services import approvals
from tests.conftest import wait_for
from tests.langgraph.graphs import refund_builder, slow_refund_graph

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

GRAPHS = (
    "refund=tests.langgraph.graphs:refund_graph,"
    "slow-refund=tests.langgraph.graphs:slow_refund_graph"
)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def _status(thread_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id_for(thread_id))


def test_a_worker_resumes_the_graph_after_a_decision(processes, alice, settings):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = GRAPHS.split(",")
    processes.worker(extra_env={"DURABLERUNS_LANGGRAPH_GRAPHS": GRAPHS})
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "W-1"}, _config("worker-1"))

    approvals.decide(Approval.objects.get(run_id=run_id_for("worker-1")), "approve", user=alice)

    wait_for(lambda: _status("worker-1") == "succeeded", timeout=60, message="graph finished")
    assert graph.get_state(_config("worker-1")).values["log"] == ["lookup", "ask_human", "paid"]


# The solo worker, the documented one (threads sharing a pool of sessions that are
# checked before reuse only after a second unused: durableruns/dbpool.py), and the
# opt-in gevent one on the same pool. Each: (the worker's pool options, its environment).
POOLED = {"DURABLERUNS_DB_POOL_SIZE": "4"}
WORKERS = {
    "solo": ({}, {}),
    "threads-pooled": ({"pool": "threads", "concurrency": 8}, POOLED),
    "gevent-pooled": ({"pool": "gevent", "concurrency": 8}, POOLED),
}


@pytest.mark.parametrize("kind", sorted(WORKERS))
def test_a_worker_killed_mid_resume_is_continued_from_the_last_checkpoint(
    processes, alice, tmp_path, monkeypatch, kind
):
    marker = tmp_path / "pay-started"
    monkeypatch.setenv("LANGGRAPH_TEST_MARKER", str(marker))
    options, kind_env = WORKERS[kind]
    env = {
        "DURABLERUNS_LANGGRAPH_GRAPHS": GRAPHS,
        "DURABLERUNS_LANGGRAPH_LEASE_TTL": "2",
        "LANGGRAPH_TEST_MARKER": str(marker),
        **kind_env,
    }
    first = processes.worker(extra_env=env, **options)
    processes.beat()
    graph = slow_refund_graph()
    graph.invoke({"order": "K-1"}, _config("killed"))
    approvals.decide(Approval.objects.get(run_id=run_id_for("killed")), "approve", user=alice)
    wait_for(marker.exists, timeout=60, message="pay started in the first worker")

    processes.kill(first)
    processes.worker(extra_env=env, **options)

    wait_for(lambda: _status("killed") == "succeeded", timeout=90, message="graph finished")
    state = graph.get_state(_config("killed"))
    print(processes.logs())
    # lookup and ask_human ran once (their checkpoints were kept); pay ran to the end once.
    assert state.values["log"] == ["lookup", "ask_human", "paid"]
    assert Approval.objects.filter(run_id=run_id_for("killed")).count() == 1


def test_more_resumes_at_once_than_the_pool_has_sessions_all_finish(processes, alice, settings):
    """Every saver call of a process runs on one thread with its own session; a resume
    that kept its own session while the graph ran took one pooled session per resume in
    flight, so with more resumes than sessions the saver's thread waited for a session
    that the resumes waiting on it held: each failed after the pool timeout, and the
    thread was left running with no lease, which nothing rang again."""
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = GRAPHS.split(",")
    env = {
        "DURABLERUNS_LANGGRAPH_GRAPHS": GRAPHS,
        "DURABLERUNS_DB_POOL_SIZE": "4",
        "DURABLERUNS_DB_POOL_TIMEOUT": "5",
    }
    worker = processes.worker(extra_env=env, pool="threads", concurrency=8)
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    threads = [f"many-{i}" for i in range(8)]
    for thread in threads:
        graph.invoke({"order": thread}, _config(thread))
    for thread in threads:  # eight doorbells at once
        approvals.decide(Approval.objects.get(run_id=run_id_for(thread)), "approve", user=alice)

    wait_for(
        lambda: all(_status(thread) == "succeeded" for thread in threads),
        timeout=60,
        message="every resumed graph to finish",
    )
    assert worker.poll() is None
    assert "couldn't get a connection" not in processes.logs()
