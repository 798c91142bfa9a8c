"""LangGraph on durableruns: change a graph's `checkpointer=` line and its threads
appear as runs in the dashboard, their interrupts in the reviewer inbox.

    from durableruns.langgraph import DurableRunsSaver
    graph = builder.compile(checkpointer=DurableRunsSaver(graph="refund-graph"))

Needs the optional dependency group `durableruns[langgraph]`.
"""

from __future__ import annotations

from durableruns.langgraph.keys import idempotency_key
from durableruns.langgraph.saver import AsyncDurableRunsSaver, DurableRunsSaver
from durableruns.langgraph.store import ThreadClosed

__all__ = ["AsyncDurableRunsSaver", "DurableRunsSaver", "ThreadClosed", "idempotency_key"]
