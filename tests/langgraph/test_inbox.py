"""LangGraph interrupts in the reviewer inbox; decisions resume the graph."""

from __future__ import annotations

import pytest
from langgraph.types import Command

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, AuditEvent, LangGraphCheckpoint, Run
from durableruns.services import approvals as approval_service
from tests.langgraph.graphs import fan_builder, refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def registered(settings):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = ["refund=tests.langgraph.graphs:refund_graph"]


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def test_an_interrupt_opens_an_approval_shaped_by_its_value():
    refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund")).invoke(
        {"order": "A-1", "cents": 12000}, _config("inbox-1")
    )

    approval = Approval.objects.get(run_id=run_id_for("inbox-1"))
    assert approval.summary == "Refund 12000 cents on A-1?"
    assert approval.payload == {"order": "A-1", "cents": 12000}
    assert approval.allowed == ["approve", "reject"]
    assert approval.name == "ask_human" and approval.interrupt_id


def test_the_inbox_lists_the_interrupt(client, alice):
    refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund")).invoke(
        {"order": "A-2"}, _config("inbox-2")
    )
    client.force_login(alice)

    page = client.get("/approvals/").content.decode()

    assert "Refund 5000 cents on A-2?" in page


def test_a_decision_resumes_the_graph_with_the_decision(registered, alice):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "A-3"}, _config("inbox-3"))
    approval = Approval.objects.get(run_id=run_id_for("inbox-3"))

    approval_service.decide(approval, "approve", user=alice, comment="ok")
    outcome = resume_thread(run_id_for("inbox-3"))

    assert outcome == "resumed 1 interrupt(s)"
    state = graph.get_state(_config("inbox-3"))
    assert state.values["log"] == ["lookup", "ask_human", "paid"]
    assert state.values["decision"] is True  # what LangGraph's docs promise for approve
    assert Run.objects.get(pk=run_id_for("inbox-3")).status == "succeeded"
    assert AuditEvent.objects.filter(action="approval.approve").count() == 1
    assert resume_thread(run_id_for("inbox-3")) == "nothing to do"


def test_two_interrupts_wait_for_both_decisions(settings, alice):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = ["fan=tests.langgraph.test_inbox:fan_graph"]
    fan_graph().invoke({"seen": []}, _config("two"))
    # The branches run in parallel: which one asked first is not fixed, so find each
    # branch's approval by its payload.
    by_branch = {a.payload["branch"]: a for a in Approval.objects.filter(run_id=run_id_for("two"))}
    first, second = by_branch["b0"], by_branch["b1"]

    approval_service.decide(first, "approve", user=alice)
    assert resume_thread(run_id_for("two")) == "waiting for decisions"
    approval_service.decide(second, "reject", user=alice, comment="not this one")
    assert resume_thread(run_id_for("two")) == "resumed 2 interrupt(s)"

    answers = fan_graph().get_state(_config("two")).values["answers"]
    assert sorted(answers) == ["b0=True", "b1=False"]


def fan_graph():
    return fan_builder(width=2, ask=True).compile(checkpointer=DurableRunsSaver(graph="fan"))


def test_a_graph_resumed_by_hand_is_not_resumed_twice(registered, alice):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "A-4"}, _config("by-hand"))
    graph.invoke(Command(resume={"decision": "approve"}), _config("by-hand"))
    approval = Approval.objects.get(run_id=run_id_for("by-hand"))

    assert (approval.state, approval.decider_name) == ("expired", "langgraph")
    assert resume_thread(run_id_for("by-hand")) == "nothing to do"
    assert graph.get_state(_config("by-hand")).values["log"][-1] == "paid"


def test_it_continues_when_a_dead_workers_last_checkpoints_were_lost(registered, alice):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "L-1"}, _config("lost"))
    approval = Approval.objects.get(run_id=run_id_for("lost"))
    approval_service.decide(approval, "approve", user=alice)
    graph.invoke(Command(resume={approval.interrupt_id: {"decision": "approve"}}), _config("lost"))
    # The worker died after ask_human's writes but before LangGraph stored the next
    # checkpoints (they are saved in the background):
    asked = LangGraphCheckpoint.objects.get(
        thread_id=run_id_for("lost"), checkpoint_ns="", next_nodes=["ask_human"]
    )
    LangGraphCheckpoint.objects.filter(
        thread_id=run_id_for("lost"), checkpoint_id__gt=asked.checkpoint_id
    ).delete()
    Run.objects.filter(pk=run_id_for("lost")).update(status="running")

    assert resume_thread(run_id_for("lost")) == "continued from the last checkpoint"

    assert graph.get_state(_config("lost")).values["log"] == ["lookup", "ask_human", "paid"]
