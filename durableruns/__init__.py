"""durableruns: durable, idempotent, replayable runs for AI agents.

The agent-author API::

    import durableruns as dr

    @dr.tool(kind=dr.IDEMPOTENT_WRITE)
    def send_email(to: str, body: str, *, idempotency_key: str) -> dict: ...

    @dr.agent("greeter", version="1", max_steps=10)
    def greeter(run: dr.Run, task: dict) -> dict:
        text = run.llm("draft", messages=[{"role": "user", "content": task["name"]}])
        return run.call(send_email, to=task["email"], body=text)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .engine.errors import (
    AmbiguousOutcome,
    BudgetExceeded,
    ChildRunCancelled,
    ChildRunFailed,
    DurableRunsError,
    ModelRecoverableError,
    NonDeterminismError,
    PermanentError,
    RetriesExhausted,
    SerializationError,
    TransientError,
    UnknownAgent,
    UsageError,
)
from .engine.llm import Reply, ToolCall, Usage
from .engine.registry import IDEMPOTENT_WRITE, READ_ONLY, UNSAFE_WRITE, Tool, agent, tool

if TYPE_CHECKING:
    from .engine.context import Run

__all__ = [
    "IDEMPOTENT_WRITE",
    "READ_ONLY",
    "UNSAFE_WRITE",
    "AmbiguousOutcome",
    "BudgetExceeded",
    "ChildRunCancelled",
    "ChildRunFailed",
    "DurableRunsError",
    "ModelRecoverableError",
    "NonDeterminismError",
    "PermanentError",
    "Reply",
    "RetriesExhausted",
    "Run",
    "SerializationError",
    "Tool",
    "ToolCall",
    "TransientError",
    "UnknownAgent",
    "Usage",
    "UsageError",
    "agent",
    "tool",
]


def __getattr__(name: str) -> Any:
    # The Run context needs the ORM, which is not importable before Django starts.
    if name == "Run":
        from .engine.context import Run

        return Run
    raise AttributeError(name)
