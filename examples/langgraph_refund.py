"""An existing LangGraph agent with a human-approval interrupt, on durableruns.

Nothing below is durableruns-specific except the checkpointer line: swap
`InMemorySaver()` for `DurableRunsSaver(...)` and the thread appears in the runs
list, its interrupt in the reviewer inbox, and a reviewer's decision resumes it on
a worker. Run it from the checkout, on the demo (nothing configured: SQLite in var/)
or on Postgres (DATABASE_URL set, in both terminals). First a worker that knows the
graph: the demo's, given the graph and the path to this file,

    DURABLERUNS_LANGGRAPH_GRAPHS=refund=langgraph_refund:graph PYTHONPATH=.:examples make demo

(or, beside a server of your own, `... .venv/bin/celery -A durableruns worker` with the
same two variables). Then, in another terminal, start a thread:

    PYTHONPATH=.:examples .venv/bin/python examples/langgraph_refund.py A-1 12000

It prints "waiting for a reviewer"; the thread is on the Runs page and its interrupt
in the reviewer's inbox, and the decision resumes it on that worker.
"""

from __future__ import annotations

import operator
import os
import sys
from typing import Annotated, TypedDict

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")
django.setup()  # a Django project already set up (a worker, a view) skips this

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import interrupt  # noqa: E402

from durableruns.langgraph import DurableRunsSaver  # noqa: E402


class Refund(TypedDict, total=False):
    order: str
    cents: int
    approved: bool
    log: Annotated[list[str], operator.add]


def check(state: Refund) -> Refund:
    return {"log": [f"checked {state['order']}"]}


def ask_reviewer(state: Refund) -> Refund:
    # The durableruns convention: summary, payload, allowed decisions (and a schema
    # for edits) become the approval. interrupt() returns what LangGraph's docs say a
    # resume value is: False for a reject; with "edit" allowed, the payload as approved
    # (the reviewer's edit, if any).
    approved = interrupt(
        {
            "summary": f"Refund {state['cents']} cents on order {state['order']}?",
            "payload": {"order": state["order"], "cents": state["cents"]},
            "allowed": ["approve", "edit", "reject"],
            "schema": {
                "type": "object",
                "properties": {"cents": {"type": "integer", "minimum": 0, "maximum": 50000}},
                "required": ["cents"],
            },
        }
    )
    if not approved:
        return {"approved": False, "log": ["reviewer rejected"]}
    return {"approved": True, "cents": approved["cents"], "log": ["reviewer approved"]}


def refund(state: Refund) -> Refund:
    if not state["approved"]:
        return {"log": ["no refund"]}
    return {"log": [f"refunded {state['cents']} cents"]}


builder = StateGraph(Refund)
builder.add_node("check", check)
builder.add_node("ask_reviewer", ask_reviewer)
builder.add_node("refund", refund)
builder.add_edge(START, "check")
builder.add_edge("check", "ask_reviewer")
builder.add_edge("ask_reviewer", "refund")
builder.add_edge("refund", END)

# checkpointer = InMemorySaver()                      # before
checkpointer = DurableRunsSaver(graph="refund")  # after: the one line that changed
graph = builder.compile(checkpointer=checkpointer)


if __name__ == "__main__":
    order, cents = sys.argv[1], int(sys.argv[2])
    config = {"configurable": {"thread_id": f"refund-{order}"}}
    result = graph.invoke({"order": order, "cents": cents}, config)
    if "__interrupt__" in result:
        print(f"waiting for a reviewer: {result['__interrupt__'][0].value['summary']}")
    print(graph.get_state(config).values)
