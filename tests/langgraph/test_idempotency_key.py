"""`durableruns.langgraph.idempotency_key`: the key a node's side effect sends is the
native runs' key for the thread, the node's superstep and name, the tool and the
arguments, so LangGraph's re-run of the node sends the same key."""

from __future__ import annotations

from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from durableruns.engine.keys import fingerprint
from durableruns.langgraph import DurableRunsSaver, idempotency_key
from durableruns.langgraph.store import run_id_for

pytestmark = pytest.mark.django_db(transaction=True)
KEYS: list[str] = []


class Mail(TypedDict, total=False):
    to: str
    attempts: int


def send(state: Mail) -> Mail:
    KEYS.append(idempotency_key("send_email", {"to": state["to"]}))
    if len(KEYS) == 1:
        raise ConnectionError("the provider hung up")  # LangGraph runs the node again
    return {"attempts": len(KEYS)}


def test_a_node_run_again_sends_the_same_key():
    builder = StateGraph(Mail)
    builder.add_node("send", send)
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    graph = builder.compile(checkpointer=DurableRunsSaver(graph="keys"))
    config = {"configurable": {"thread_id": "keyed"}}
    with pytest.raises(ConnectionError):
        graph.invoke({"to": "ada@example.com"}, config)
    graph.invoke(None, config)

    expected = f"{run_id_for('keyed')}:1-send:send_email:{fingerprint({'to': 'ada@example.com'})}"
    assert [expected, expected] == KEYS


def test_it_is_refused_outside_a_node():
    with pytest.raises((LookupError, RuntimeError)):
        idempotency_key("send_email", {})
