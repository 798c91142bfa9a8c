"""A node that calls `interrupt()` twice, as LangGraph's docs show ("multiple
interrupts in a single node": each resume replays the node and the earlier
`interrupt()` returns its earlier answer), resumed twice from the inbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from durableruns.services import approvals
from tests.langgraph.mail import Mail, send

pytestmark = pytest.mark.django_db(transaction=True)


def address_and_confirm(state: Mail) -> Mail:
    to = interrupt({"summary": "Which address?", "allowed": ["respond", "reject"]})
    is_approved = interrupt({"summary": f"Send the e-mail to {to}?", "payload": {"to": to}})
    return {"to": to, "outcome": "approved" if is_approved else "cancelled"}


def two_question_graph():
    builder = StateGraph(Mail)
    builder.add_node("address_and_confirm", address_and_confirm)
    builder.add_node("send", send)
    builder.add_edge(START, "address_and_confirm")
    builder.add_conditional_edges(
        "address_and_confirm", lambda s: "send" if s["outcome"] == "approved" else END
    )
    builder.add_edge("send", END)
    return builder.compile(checkpointer=DurableRunsSaver(graph="two-questions"))


@pytest.fixture(autouse=True)
def sent_log(settings, tmp_path, monkeypatch) -> Path:
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = [
        "two-questions=tests.langgraph.test_two_interrupts:two_question_graph"
    ]
    log = tmp_path / "sent.log"
    monkeypatch.setenv("MAIL_SENT_LOG", str(log))
    return log


def _answer(thread_id: str, decision: str, user, **fields) -> None:
    pending = Approval.objects.get(run_id=run_id_for(thread_id), state="pending")
    approvals.decide(pending, decision, user=user, **fields)
    assert resume_thread(run_id_for(thread_id)) == "resumed 1 interrupt(s)"


def test_a_node_asking_twice_is_resumed_twice_and_sends_once(alice, sent_log):
    config = {"configurable": {"thread_id": "twice"}}
    two_question_graph().invoke({}, config)

    _answer("twice", "respond", alice, comment="carol@example.com")
    second = Approval.objects.get(run_id=run_id_for("twice"), state="pending")
    assert second.summary == "Send the e-mail to carol@example.com?"
    _answer("twice", "approve", alice)

    assert sent_log.read_text().splitlines() == ["carol@example.com"]
    assert two_question_graph().get_state(config).values["outcome"] == "sent"
    assert Run.objects.get(pk=run_id_for("twice")).status == "succeeded"
    assert Approval.objects.filter(run_id=run_id_for("twice")).count() == 2


def test_a_reject_of_the_second_question_sends_nothing(alice, sent_log):
    config = {"configurable": {"thread_id": "twice-no"}}
    two_question_graph().invoke({}, config)

    _answer("twice-no", "respond", alice, comment="carol@example.com")
    _answer("twice-no", "reject", alice, comment="not Carol")

    assert not sent_log.exists()
    assert two_question_graph().get_state(config).values["outcome"] == "cancelled"
    assert Run.objects.get(pk=run_id_for("twice-no")).status == "succeeded"
