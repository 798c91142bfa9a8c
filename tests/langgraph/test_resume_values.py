"""`interrupt()` returns what LangGraph's docs promise for each reviewer decision, so
the docs' own patterns (`if is_approved:`, `value = interrupt(...)`) read right."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval
from durableruns.services import approvals
from tests.langgraph.mail import Mail, review_graph, send_graph

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def registered(settings, tmp_path, monkeypatch) -> Path:
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = [
        "mail=tests.langgraph.mail:send_graph",
        "review=tests.langgraph.mail:review_graph",
        "ask=tests.langgraph.test_resume_values:ask_graph",
        "skip=tests.langgraph.test_resume_values:skip_graph",
    ]
    sent_log = tmp_path / "sent.log"
    monkeypatch.setenv("MAIL_SENT_LOG", str(sent_log))
    return sent_log


def _decide(thread_id: str, decision: str, user, **fields) -> dict:
    approval = Approval.objects.get(run_id=run_id_for(thread_id))
    approvals.decide(approval, decision, user=user, **fields)
    assert resume_thread(run_id_for(thread_id)) == "resumed 1 interrupt(s)"
    return {"configurable": {"thread_id": thread_id}}


def _sent(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_reject_sends_nothing(alice, registered):
    send_graph().invoke({"to": "bob@example.com"}, {"configurable": {"thread_id": "rej"}})

    config = _decide("rej", "reject", alice, comment="not to Bob")

    assert _sent(registered) == []
    assert send_graph().get_state(config).values["outcome"] == "cancelled"


def test_an_approve_sends_once(alice, registered):
    send_graph().invoke({"to": "ann@example.com"}, {"configurable": {"thread_id": "ok"}})

    config = _decide("ok", "approve", alice)

    assert _sent(registered) == ["ann@example.com"]
    assert send_graph().get_state(config).values["outcome"] == "sent"


def test_an_edit_returns_the_edited_value(alice):
    draft = {"subject": "Hi", "body": "draft"}
    review_graph().invoke({"draft": draft}, {"configurable": {"thread_id": "edit"}})

    config = _decide("edit", "edit", alice, payload={"subject": "Hello", "body": "final"})

    assert review_graph().get_state(config).values["draft"] == {"subject": "Hello", "body": "final"}


def test_an_approve_of_an_editable_value_returns_it_unchanged(alice):
    draft = {"subject": "Hi", "body": "draft"}
    review_graph().invoke({"draft": draft}, {"configurable": {"thread_id": "as-is"}})

    config = _decide("as-is", "approve", alice)

    assert review_graph().get_state(config).values["draft"] == draft


def ask_address(state: Mail) -> Mail:
    return {"to": interrupt({"summary": "Which address?", "allowed": ["respond", "reject"]})}


def confirm(state: Mail) -> Mail:
    return {"draft": interrupt({"summary": f"Write to {state['to']}?", "returns": "decision"})}


def ask_graph():
    builder = StateGraph(Mail)
    builder.add_node("ask_address", ask_address)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "ask_address")
    builder.add_edge("ask_address", "confirm")
    builder.add_edge("confirm", END)
    return builder.compile(checkpointer=DurableRunsSaver(graph="ask"))


def test_a_response_returns_the_reviewers_words_and_returns_decision_opts_out(alice):
    ask_graph().invoke({}, {"configurable": {"thread_id": "ask"}})
    _decide("ask", "respond", alice, comment="carol@example.com")

    second = Approval.objects.get(run_id=run_id_for("ask"), state="pending")
    approvals.decide(second, "approve", user=alice, comment="yes")
    assert resume_thread(run_id_for("ask")) == "resumed 1 interrupt(s)"

    values = ask_graph().get_state({"configurable": {"thread_id": "ask"}}).values
    assert values["to"] == "carol@example.com"
    assert values["draft"]["decision"] == "approve" and values["draft"]["comment"] == "yes"
    assert values["draft"]["approved"] is True


def maybe_send(state: Mail) -> Mail:
    is_approved = interrupt({"summary": "Send it?", "allowed": ["approve", "reject", "ignore"]})
    return {"outcome": "sent" if is_approved else f"not sent: {is_approved!r}"}


def skip_graph():
    builder = StateGraph(Mail)
    builder.add_node("maybe_send", maybe_send)
    builder.add_edge(START, "maybe_send")
    builder.add_edge("maybe_send", END)
    return builder.compile(checkpointer=DurableRunsSaver(graph="skip"))


def test_an_ignore_returns_none_so_the_docs_if_sends_nothing(alice):
    skip_graph().invoke({}, {"configurable": {"thread_id": "skip"}})

    config = _decide("skip", "ignore", alice)

    assert skip_graph().get_state(config).values["outcome"] == "not sent: None"
