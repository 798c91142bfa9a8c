"""Executing a model reply's tool calls through `run.call`, and the messages that carry
the results back to the model (Run.call_tools is the author's entry point).

Each call is an ordinary tool step, so it has its own idempotency key, ledger row and
replay; the calls of one reply are the branches of one fan-out (engine/parallel.py), so
they run concurrently and their results come back in the reply's order. What the model
got wrong (an unknown tool, arguments that are not a JSON object or do not fit the
tool) is decided from the recorded reply alone, so it is the same on every replay; it
becomes an error result the model can read and correct, not a failed run, and takes no
step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .errors import ModelRecoverableError, UsageError
from .keys import canonical_json
from .llm import Reply, ToolCall, tool_messages
from .registry import Tool

if TYPE_CHECKING:
    from .context import Run


def call_tools(run: Run, reply: Reply, tools: Iterable[Tool]) -> list[dict[str, Any]]:
    by_name = {tool.name: tool for tool in tools}
    # A call the model got wrong is answered without a step; the others are the
    # branches of one fan-out, each at the position its place in the reply gives it.
    answers = [_misfit(call, by_name) for call in reply.tool_calls]
    calls = [call for call, answer in zip(reply.tool_calls, answers, strict=True) if answer is None]
    values = iter(
        run.parallel([_branch(run, call, by_name) for call in calls], return_exceptions=True)
    )
    results = [
        (call, answer, True) if answer is not None else _result(call, next(values))
        for call, answer in zip(reply.tool_calls, answers, strict=True)
    ]
    return tool_messages(reply, results)


def _misfit(call: ToolCall, tools: dict[str, Tool]) -> str | None:
    """The error result of a call that cannot run (decided from the reply alone)."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return _error(f"unknown tool {call.name!r} (tools: {known})")
    if call.arguments is None:
        return _error(call.error)
    try:
        tool.bind(call.arguments)
    except UsageError as exc:
        return _error(str(exc))
    return None


def _branch(run: Run, call: ToolCall, tools: dict[str, Tool]) -> Callable[[], Any]:
    tool, arguments = tools[call.name], call.arguments or {}
    return lambda: run.call(tool, **arguments)


def _result(call: ToolCall, value: Any) -> tuple[ToolCall, str, bool]:
    if isinstance(value, UsageError | ModelRecoverableError):
        return call, _error(str(value)), True
    if isinstance(value, BaseException):
        raise value  # the first failure in the reply's order: parallel settled every call
    return call, value if isinstance(value, str) else canonical_json(value), False


def _error(message: str) -> str:
    return canonical_json({"error": message})
