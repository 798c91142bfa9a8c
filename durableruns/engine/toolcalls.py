"""Executing a model reply's tool calls through `run.call`, and the messages that carry
the results back to the model (Run.call_tools is the author's entry point).

Each call is an ordinary tool step, so it has its own idempotency key, ledger row and
replay. What the model got wrong (an unknown tool, arguments that are not a JSON object
or do not fit the tool) is decided from the recorded reply alone, so it is the same on
every replay; it becomes an error result the model can read and correct, not a failed
run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .errors import ModelRecoverableError, UsageError
from .keys import canonical_json
from .llm import Reply, ToolCall, tool_messages
from .registry import Tool

if TYPE_CHECKING:
    from .context import Run


def call_tools(run: Run, reply: Reply, tools: Iterable[Tool]) -> list[dict[str, Any]]:
    by_name = {tool.name: tool for tool in tools}
    # One result per call, kept in the reply's order: a concurrent version fills the
    # same slots in whatever order its branches finish.
    results = [_result(run, call, by_name) for call in reply.tool_calls]
    return tool_messages(reply, results)


def _result(run: Run, call: ToolCall, tools: dict[str, Tool]) -> tuple[ToolCall, str, bool]:
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return call, _error(f"unknown tool {call.name!r} (tools: {known})"), True
    if call.arguments is None:
        return call, _error(call.error), True
    try:
        tool.bind(call.arguments)
        value = run.call(tool, **call.arguments)
    except (UsageError, ModelRecoverableError) as exc:
        return call, _error(str(exc)), True
    return call, value if isinstance(value, str) else canonical_json(value), False


def _error(message: str) -> str:
    return canonical_json({"error": message})
