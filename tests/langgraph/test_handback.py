"""A thread resumed on a worker that lacks its graph waits visibly, with a wake-up
time the sweeper honours, and continues once a worker has the graph (issue 22: it
stayed "running" with no lease and no wake-up, and nothing recovered it). The same
with real worker processes: tests/chaos/test_handback.py."""

from __future__ import annotations

import pytest
from django.test import Client

from durableruns.engine import handback
from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from durableruns.services import approvals as approval_service
from tests.langgraph.graphs import refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_thread_whose_graph_this_worker_lacks_waits_and_then_continues(settings, alice, bob):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = []  # this worker does not know "refund"
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "H-1", "cents": 100}, {"configurable": {"thread_id": "handed"}})
    run_id = run_id_for("handed")
    approval_service.decide(Approval.objects.get(run_id=run_id), "approve", user=alice)

    assert resume_thread(run_id) == "handed-back"

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.lease_owner) == ("waiting", "")
    assert run.wake_at is not None  # the sweeper rings it again: it is not stranded
    assert "LangGraph graph 'refund'" in handback.waiting_reason(run)
    operator = Client()
    operator.force_login(bob)
    assert operator.post(f"/api/runs/{run_id}/resume/").status_code == 200
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = ["refund=tests.langgraph.graphs:refund_graph"]
    assert resume_thread(run_id) == "resumed 1 interrupt(s)"
    assert Run.objects.get(pk=run_id).status == "succeeded"
    state = graph.get_state({"configurable": {"thread_id": "handed"}})
    assert state.values["log"] == ["lookup", "ask_human", "paid"]
