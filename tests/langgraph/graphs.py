"""Small real LangGraph graphs the tests (and the worker in the resume tests) run."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Refund(TypedDict, total=False):
    order: str
    cents: int
    decision: bool | dict
    log: Annotated[list[str], operator.add]


def lookup(state: Refund) -> Refund:
    return {"cents": state.get("cents", 5000), "log": ["lookup"]}


def ask_human(state: Refund) -> Refund:
    decision = interrupt(
        {
            "summary": f"Refund {state['cents']} cents on {state['order']}?",
            "payload": {"order": state["order"], "cents": state["cents"]},
            "allowed": ["approve", "reject"],
        }
    )
    return {"decision": decision, "log": ["ask_human"]}


def pay(state: Refund) -> Refund:
    # A worker resumes with what LangGraph's docs promise (True/False); the tests that
    # resume by hand pass a decision dict.
    decision = state.get("decision")
    approved = decision is True or (
        isinstance(decision, dict) and decision.get("decision") == "approve"
    )
    return {"log": ["paid" if approved else "not paid"]}


def refund_builder() -> StateGraph:
    builder = StateGraph(Refund)
    builder.add_node("lookup", lookup)
    builder.add_node("ask_human", ask_human)
    builder.add_node("pay", pay)
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "ask_human")
    builder.add_edge("ask_human", "pay")
    builder.add_edge("pay", END)
    return builder


class Fan(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]
    answers: Annotated[list[str], operator.add]


def fan_builder(width: int = 5, ask: bool = False) -> StateGraph:
    """START fans out to `width` parallel nodes, which join in `done`."""
    builder = StateGraph(Fan)

    def branch(name: str):
        def node(state: Fan) -> Fan:
            if ask:
                answer = interrupt({"summary": f"{name}?", "payload": {"branch": name}})
                return {"seen": [name], "answers": [f"{name}={answer}"]}
            return {"seen": [name]}

        return node

    for i in range(width):
        builder.add_node(f"b{i}", branch(f"b{i}"))
        builder.add_edge(START, f"b{i}")
        builder.add_edge(f"b{i}", "done")
    builder.add_node("done", lambda state: {"seen": ["done"]})
    builder.add_edge("done", END)
    return builder


def chain_builder(length: int = 20) -> StateGraph:
    """A straight line of `length` nodes, each adding one to the count."""

    class Count(TypedDict):
        count: int

    builder = StateGraph(Count)
    previous = START
    for i in range(length):
        builder.add_node(f"n{i}", lambda state: {"count": state["count"] + 1})
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder


def refund_graph():
    """The compiled graph the worker resumes (DURABLERUNS_LANGGRAPH_GRAPHS in tests)."""
    from durableruns.langgraph import DurableRunsSaver

    return refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))


def slow_refund_graph():
    """The refund graph whose `pay` node hangs on its first attempt (a worker is killed
    there): LANGGRAPH_TEST_MARKER names the file that says it started once."""
    import os
    import time
    from pathlib import Path

    from durableruns.langgraph import DurableRunsSaver

    def slow_pay(state: Refund) -> Refund:
        marker = Path(os.environ["LANGGRAPH_TEST_MARKER"])
        if not marker.exists():
            marker.write_text("started")
            time.sleep(120)  # killed here
        return pay(state)

    builder = refund_builder()
    builder.nodes.pop("pay")
    builder.add_node("pay", slow_pay)
    return builder.compile(checkpointer=DurableRunsSaver(graph="slow-refund"))
