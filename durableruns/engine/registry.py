"""Agents and tools, registered when their module is imported."""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import jsonschema

from .errors import UnknownAgent, UsageError

READ_ONLY = "read_only"
IDEMPOTENT_WRITE = "idempotent_write"
UNSAFE_WRITE = "unsafe_write"
TOOL_KINDS = (READ_ONLY, IDEMPOTENT_WRITE, UNSAFE_WRITE)

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise UsageError(
            f"{what} name {name!r} must be 1-100 characters of letters, digits, '.', '_' or '-'"
        )
    return name


def refuse_async(fn: Callable[..., Any], what: str) -> None:
    """Refused where it is defined: called, an `async def` returns a coroutine, which
    is not a result anyone can store (and was never run)."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise UsageError(
            f"{what} is an async def; the engine calls it synchronously: make it a plain "
            "def (inside, `asyncio.run(...)` can drive async code)"
        )


@dataclass
class Tool:
    name: str
    fn: Callable[..., Any]
    kind: str
    reconcile_fn: Callable[..., Any] | None = None
    sandbox_fn: Callable[..., Any] | None = None

    def sandbox(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register what a sandboxed run gets back instead of calling this write tool."""
        self.sandbox_fn = fn
        return fn

    def reconcile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register the read-before-write hook: the result if the call happened, else None."""
        self.reconcile_fn = fn
        return fn

    def bind(self, args: dict[str, Any]) -> None:
        """Fail before anything is recorded when agent code calls the tool wrongly."""
        try:
            inspect.signature(self.fn).bind(**args, idempotency_key="")
        except TypeError as exc:
            raise UsageError(f"tool {self.name!r} called with bad arguments: {exc}") from None

    def __call__(self, **kwargs: Any) -> Any:
        return self.fn(**kwargs)


@dataclass
class Agent:
    name: str
    version: str
    fn: Callable[..., Any]
    max_steps: int | None = None
    max_duration: timedelta | None = None
    description: str = field(default="")
    max_tokens: int | None = None
    max_cost: Decimal | None = None
    input_schema: dict[str, Any] | None = None

    def check_input(self, run_input: Any) -> None:
        """Refuse an input that does not fit the agent's declared schema (UsageError)."""
        if self.input_schema is None:
            return
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(self.input_schema).iter_errors(run_input)
        )
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "input"
            message = f"the input does not fit agent {self.name!r}: {where}: {error.message}"
            raise UsageError(message)


_TOOLS: dict[str, Tool] = {}
_AGENTS: dict[tuple[str, str], Agent] = {}


def tool(kind: str = READ_ONLY, *, name: str | None = None) -> Callable[[Callable[..., Any]], Tool]:
    if kind not in TOOL_KINDS:
        raise UsageError(f"tool kind must be one of {TOOL_KINDS}, not {kind!r}")

    def register(fn: Callable[..., Any]) -> Tool:
        registered = Tool(check_name(name or fn.__name__, "tool"), fn, kind)
        refuse_async(fn, f"tool {registered.name!r}")
        if "idempotency_key" not in inspect.signature(fn).parameters:
            raise UsageError(f"tool {registered.name!r} must accept an idempotency_key argument")
        _TOOLS[registered.name] = registered
        return registered

    return register


def agent(
    name: str,
    *,
    version: str = "1",
    max_steps: int | None = None,
    max_duration: timedelta | None = None,
    max_tokens: int | None = None,
    max_cost: Decimal | str | float | None = None,
    input_schema: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register an agent. `max_tokens` (prompt plus completion) and `max_cost` (dollars,
    priced by DURABLERUNS_MODEL_PRICES) stop the run before its next step once spent.
    `input_schema` (JSON Schema): a run whose input does not fit it is refused before it
    is stored, and the dashboard's start form shows it."""
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise UsageError(f"max_tokens must be a positive integer, not {max_tokens!r}")
    cost_limit = None if max_cost is None else _positive_decimal(max_cost)
    _check_schema(input_schema)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        refuse_async(fn, f"agent {name!r}")
        definition = Agent(
            check_name(name, "agent"),
            check_name(version, "version"),
            fn,
            max_steps,
            max_duration,
            inspect.getdoc(fn) or "",
            max_tokens,
            cost_limit,
            input_schema,
        )
        _AGENTS[(definition.name, definition.version)] = definition
        fn.agent = definition  # type: ignore[attr-defined]
        return fn

    return register


def _check_schema(schema: Any) -> None:
    if schema is None:
        return
    if not isinstance(schema, dict):
        raise UsageError("input_schema must be a JSON Schema object (a dict)")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UsageError(f"input_schema is not a valid JSON Schema: {exc.message}") from None


def _positive_decimal(value: Decimal | str | float) -> Decimal:
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite() or amount <= 0:
        raise UsageError(f"max_cost must be a positive number of dollars, not {value!r}")
    return amount


def get_agent(name: str, version: str | None = None) -> Agent:
    """The agent at `version`, or the newest registered version when none is given."""
    if version is not None:
        found = _AGENTS.get((name, version))
        if found is None:
            raise UnknownAgent(f"agent {name!r} has no registered version {version!r}")
        return found
    versions = [a for (n, _), a in _AGENTS.items() if n == name]
    if not versions:
        known = ", ".join(sorted({n for n, _ in _AGENTS})) or "none"
        raise UnknownAgent(f"unknown agent {name!r} (registered: {known})")
    return max(versions, key=lambda a: _version_order(a.version))


def _version_order(version: str) -> tuple:
    # Numbers before words, so "1.10" and "1.rc" compare; ASCII digits only ("²" is a word).
    parts = re.split(r"[.\-]", version)
    return tuple((0, int(p), "") if p.isascii() and p.isdigit() else (1, 0, p) for p in parts)


def agents() -> list[Agent]:
    return sorted(_AGENTS.values(), key=lambda a: (a.name, _version_order(a.version)))


def tools() -> list[Tool]:
    return sorted(_TOOLS.values(), key=lambda t: t.name)


def find_tool(name: str) -> Tool | None:
    """The registered tool called `name`, or None (e.g. a tool a later deploy removed)."""
    return _TOOLS.get(name)


def unregister_agent(name: str, version: str) -> None:
    """For tests that simulate a deploy which dropped a version."""
    _AGENTS.pop((name, version), None)


def load_agent_modules(modules: list[str]) -> list[str]:
    """Import the modules that register agents; returns those that failed.

    A module that fails to import is logged, naming the setting and the module, and
    skipped: one bad entry must not stop a process or a command (`migrate` included).
    The runs of the agents it would have registered wait for a worker that has them
    (engine/handback.py)."""
    failed = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            log.error(
                "DURABLERUNS_AGENT_MODULES names %r, which cannot be imported (%s: %s); "
                "this process serves no agent from it",
                module,
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, ModuleNotFoundError),
            )
            failed.append(module)
    return failed
