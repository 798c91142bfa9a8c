"""A LangGraph graph with a side-effecting node, written as LangGraph's docs write
graphs (a TypedDict state, one function per node, edges from START to END), for the
crash matrix. `send_email` really sends through the demo e-mail provider, with the
key `durableruns.langgraph.idempotency_key` gives it: LangGraph runs a node again
when its worker dies before the node's writes are stored."""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph

from durableruns.demo import tools
from durableruns.langgraph import DurableRunsSaver, idempotency_key


class Email(TypedDict, total=False):
    order: str
    to: str
    subject: str
    body: str
    sent_to: str
    logged: bool


def write_email(state: Email) -> Email:
    return {
        "subject": f"Your refund for order {state['order']}",
        "body": "Your refund is on its way.",
    }


def send_email(state: Email) -> Email:
    message = {"to": state["to"], "subject": state["subject"], "body": state["body"]}
    tools.send_email(**message, idempotency_key=idempotency_key("send_email", message))
    return {"sent_to": state["to"]}


def log_sent(state: Email) -> Email:
    return {"logged": True}


def mail_graph():
    builder = StateGraph(Email)
    builder.add_node("write_email", write_email)
    builder.add_node("send_email", send_email)
    builder.add_node("log_sent", log_sent)
    builder.add_edge(START, "write_email")
    builder.add_edge("write_email", "send_email")
    builder.add_edge("send_email", "log_sent")
    builder.add_edge("log_sent", END)
    return builder.compile(checkpointer=DurableRunsSaver(graph="crash-mail"))
