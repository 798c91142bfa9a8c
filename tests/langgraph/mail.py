"""LangGraph graphs written as LangGraph's own human-in-the-loop docs write them: the
e-mail is sent only `if is_approved:`, and a review node keeps what `interrupt()`
returns. The send node appends a line to $MAIL_SENT_LOG (the side effect the tests
count) after sleeping $MAIL_SEND_SECONDS (a slow provider)."""

from __future__ import annotations

import os
import time
from typing import Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from durableruns.langgraph import DurableRunsSaver


class Mail(TypedDict, total=False):
    to: str
    draft: dict
    outcome: str


def approve_send(state: Mail) -> Command[Literal["send", "cancel"]]:
    is_approved = interrupt(
        {"summary": f"Send the e-mail to {state['to']}?", "payload": {"to": state["to"]}}
    )
    if is_approved:
        return Command(goto="send")
    return Command(goto="cancel")


def send(state: Mail) -> Mail:
    time.sleep(float(os.environ.get("MAIL_SEND_SECONDS", "0")))
    with open(os.environ["MAIL_SENT_LOG"], "a") as sent:
        sent.write(f"{state['to']}\n")
    return {"outcome": "sent"}


def cancel(state: Mail) -> Mail:
    return {"outcome": "cancelled"}


def review_draft(state: Mail) -> Mail:
    reviewed = interrupt(
        {
            "summary": "Review the draft",
            "payload": state["draft"],
            "allowed": ["approve", "edit", "reject"],
        }
    )
    return {"draft": reviewed}


def send_graph():
    builder = StateGraph(Mail)
    builder.add_node("approve_send", approve_send)
    builder.add_node("send", send)
    builder.add_node("cancel", cancel)
    builder.add_edge(START, "approve_send")
    builder.add_edge("send", END)
    builder.add_edge("cancel", END)
    return builder.compile(checkpointer=DurableRunsSaver(graph="mail"))


def review_graph():
    builder = StateGraph(Mail)
    builder.add_node("review_draft", review_draft)
    builder.add_edge(START, "review_draft")
    builder.add_edge("review_draft", END)
    return builder.compile(checkpointer=DurableRunsSaver(graph="review"))
