"""Model clients and the replies they give. The engine records every reply whole, so a
client is called once per step and a replay returns the same content, tool calls and
usage.

A client has one method, `complete(messages=..., agent=..., step=...,
idempotency_key=..., **params)`, and raises TransientError for rate limits and server
errors, PermanentError otherwise. It may return an OpenAI-compatible chat completion
(a dict, or an object with `model_dump()` such as the openai SDK's or LiteLLM's
response), an Anthropic Messages response (content blocks with `tool_use`), or the
engine's own recorded shape (`record()`); `as_record()` reads all of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import httpx
from django.conf import settings
from django.utils.module_loading import import_string

from .errors import ModelRecoverableError, PermanentError, TransientError

OPENAI = "openai"
ANTHROPIC = "anthropic"


class ModelClient(Protocol):
    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        agent: str,
        step: str,
        idempotency_key: str,
        **params: Any,
    ) -> Any: ...


@dataclass(frozen=True)
class ToolCall:
    """One tool the model asked for. `arguments` is None when the model's JSON was
    invalid (`error` says why), so the agent can tell the model instead of crashing."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    error: str = ""


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: Decimal | None = None  # None: the model has no price in DURABLERUNS_MODEL_PRICES

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, eq=False, repr=False)
class Reply(str):
    """The assistant's whole message. It is also its text (a `str` whose value is
    `content`, "" when the model only called tools), so agents written when `run.llm`
    returned the text keep working: `json.loads(reply)`, f-strings, passing it on in
    messages or tool arguments, returning it as a result. Check `tool_calls`, not the
    reply's truthiness, to see whether the model wants tools run."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    # The assistant message as the provider sent it, to send back in the conversation.
    message: dict[str, Any] = field(default_factory=dict)
    shape: str = OPENAI

    def __new__(cls, content: str | None = None, *args: Any, **kwargs: Any) -> Reply:
        return super().__new__(cls, content or "")

    def __repr__(self) -> str:
        calls = ", ".join(call.name for call in self.tool_calls)
        return (
            f"Reply({self.content!r}, tool_calls=[{calls}], finish_reason={self.finish_reason!r})"
        )

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Reply:
        """The reply a recorded llm step holds (older records hold only content and usage)."""
        usage = record.get("usage") or {}
        cost = usage.get("cost")
        content = record.get("content")
        return cls(
            content,
            tool_calls=tuple(_tool_call(call) for call in record.get("tool_calls") or ()),
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                cached_tokens=int(usage.get("cached_tokens") or 0),
                cost=None if cost is None else Decimal(str(cost)),
            ),
            finish_reason=record.get("finish_reason"),
            model=record.get("model") or "",
            message=record.get("message") or {"role": "assistant", "content": content},
            shape=record.get("shape") or OPENAI,
        )


def _tool_call(recorded: dict[str, Any]) -> ToolCall:
    raw = recorded.get("arguments") or "{}"
    try:
        arguments = json.loads(raw)
    except (TypeError, ValueError) as exc:
        return ToolCall(recorded["id"], recorded["name"], None, f"invalid JSON arguments: {exc}")
    if not isinstance(arguments, dict):
        return ToolCall(recorded["id"], recorded["name"], None, "arguments must be a JSON object")
    return ToolCall(recorded["id"], recorded["name"], arguments)


# --- Reading what clients return ----------------------------------------------------


def as_record(raw: Any, *, model: str) -> dict[str, Any]:
    """What an llm step records: the client's reply in one shape, priced. `model` is the
    model asked for, used when the reply does not say which model answered."""
    if hasattr(raw, "model_dump"):  # the openai and anthropic SDKs, LiteLLM
        raw = raw.model_dump()
    if not isinstance(raw, dict):
        raise PermanentError(f"the model client returned {type(raw).__name__}, not a reply")
    if "choices" in raw:
        record = _from_openai(raw)
    elif isinstance(raw.get("content"), list):
        record = _from_anthropic(raw)
    else:
        record = _from_recorded(raw)
    content = record.get("content")
    record["content"] = content if content is None or isinstance(content, str) else str(content)
    record["tool_calls"] = [_clean_call(call) for call in record["tool_calls"]]
    record["model"] = str(record.get("model") or model)
    record["usage"]["cost"] = price(record["model"], record["usage"])
    return record


def _clean_call(call: Any) -> dict[str, str]:
    """A tool call as recorded: string id, name and JSON arguments, whatever the server
    sent (some OpenAI-compatible servers send arguments as an object)."""
    if not isinstance(call, dict):
        raise PermanentError(f"the model sent a tool call that is not an object: {call!r:.200}")
    arguments = call.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, sort_keys=True)
    return {
        "id": str(call.get("id") or ""),
        "name": str(call.get("name") or ""),
        "arguments": arguments,
    }


def _from_recorded(raw: dict[str, Any]) -> dict[str, Any]:
    usage = raw.get("usage") or {}
    return {
        **raw,
        "tool_calls": list(raw.get("tool_calls") or []),
        "usage": _usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), usage),
    }


def _from_openai(raw: dict[str, Any]) -> dict[str, Any]:
    choice = (raw.get("choices") or [{}])[0]
    message = dict(choice.get("message") or {})
    usage = raw.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return {
        "content": message.get("content"),
        "tool_calls": [
            {
                "id": call.get("id", ""),
                "name": (call.get("function") or {}).get("name", ""),
                "arguments": (call.get("function") or {}).get("arguments"),
            }
            for call in message.get("tool_calls") or []
        ],
        "usage": _usage(
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            {"cached_tokens": details.get("cached_tokens")},
        ),
        "finish_reason": choice.get("finish_reason"),
        "model": raw.get("model") or "",
        "message": {key: value for key, value in message.items() if value is not None},
        "shape": OPENAI,
    }


def _from_anthropic(raw: dict[str, Any]) -> dict[str, Any]:
    blocks = raw.get("content") or []
    texts = [block.get("text", "") for block in blocks if block.get("type") == "text"]
    usage = raw.get("usage") or {}
    cached = int(usage.get("cache_read_input_tokens") or 0)
    # Anthropic's input_tokens leaves out the cached and cache-writing tokens.
    prompt = int(usage.get("input_tokens") or 0) + cached
    prompt += int(usage.get("cache_creation_input_tokens") or 0)
    return {
        "content": "".join(texts) if texts else None,
        "tool_calls": [
            {
                "id": block.get("id", ""),
                "name": block.get("name", ""),
                "arguments": json.dumps(block.get("input") or {}, sort_keys=True),
            }
            for block in blocks
            if block.get("type") == "tool_use"
        ],
        "usage": _usage(prompt, usage.get("output_tokens"), {"cached_tokens": cached}),
        "finish_reason": raw.get("stop_reason"),
        "model": raw.get("model") or "",
        "message": {"role": "assistant", "content": blocks},
        "shape": ANTHROPIC,
    }


def _usage(prompt: Any, completion: Any, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": int(prompt or 0),
        "completion_tokens": int(completion or 0),
        "cached_tokens": int(extra.get("cached_tokens") or 0),
    }


def price(model: str, usage: dict[str, Any]) -> str | None:
    """The reply's cost in dollars (a decimal string, recorded with the step), or None
    when DURABLERUNS_MODEL_PRICES has no entry for the model. Prices are per million
    tokens; cached prompt tokens cost `cached_input` (default: `input`)."""
    prices = _price_of(model)
    if prices is None:
        return None
    cached = usage["cached_tokens"]
    cost = (
        (usage["prompt_tokens"] - cached) * Decimal(str(prices["input"]))
        + cached * Decimal(str(prices.get("cached_input", prices["input"])))
        + usage["completion_tokens"] * Decimal(str(prices["output"]))
    ) / 1_000_000
    return str(cost.quantize(Decimal("1e-10")).normalize())


def _price_of(model: str) -> dict[str, Any] | None:
    """The exact entry, else the longest entry the model's name starts with: providers
    answer with dated names ("gpt-4o-mini-2024-07-18") for the name asked for."""
    table = settings.DURABLERUNS_MODEL_PRICES
    if model in table:
        return table[model]
    prefixes = [name for name in table if model.startswith(name)]
    return table[max(prefixes, key=len)] if prefixes else None


# --- Tool results sent back to the model ---------------------------------------------


def tool_messages(reply: Reply, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
    """The messages that carry `results` ((call, text, is_error) in the reply's order)
    back to the model, in the reply's shape, after the assistant message itself."""
    if reply.shape == ANTHROPIC:
        blocks = [
            {"type": "tool_result", "tool_use_id": call.id, "content": text, "is_error": failed}
            for call, text, failed in results
        ]
        return [reply.message, {"role": "user", "content": blocks}]
    return [
        reply.message,
        *({"role": "tool", "tool_call_id": call.id, "content": text} for call, text, _ in results),
    ]


# --- Clients ---------------------------------------------------------------------------


def get_client() -> ModelClient:
    if settings.DURABLERUNS_MODEL_URL:
        if settings.DURABLERUNS_MODEL_API == ANTHROPIC:
            return AnthropicClient()
        return OpenAICompatibleClient()
    default = "durableruns.demo.model.ScriptedModel"
    return import_string(getattr(settings, "DURABLERUNS_MODEL_CLIENT", default))()


def model_name(params: dict[str, Any]) -> str:
    return str(params.get("model") or settings.DURABLERUNS_MODEL_NAME)


def _post(path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    """POST to the model endpoint; no retries here: the engine is the one retry layer."""
    try:
        response = httpx.post(
            f"{settings.DURABLERUNS_MODEL_URL.rstrip('/')}/{path}",
            json=body,
            headers=headers,
            timeout=120,
        )
    except httpx.TransportError as exc:
        raise TransientError(f"model endpoint unreachable: {exc}") from None
    if response.status_code == 429 or response.status_code >= 500:
        raise TransientError(f"model endpoint answered {response.status_code}")
    if response.status_code == 400:
        raise ModelRecoverableError(response.text[:500])
    if response.status_code >= 400:
        raise PermanentError(f"model endpoint answered {response.status_code}")
    return response.json()


class OpenAICompatibleClient:
    """Chat completions against any OpenAI-compatible endpoint (`tools=` passes through)."""

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        agent: str,
        step: str,
        idempotency_key: str,
        **params: Any,
    ) -> Any:
        body = {"model": model_name(params), "messages": messages, **params}
        headers = {"Idempotency-Key": idempotency_key}
        # A local server may need no key, and httpx refuses the header "Bearer ".
        if settings.DURABLERUNS_MODEL_API_KEY:
            headers["Authorization"] = f"Bearer {settings.DURABLERUNS_MODEL_API_KEY}"
        return _post("chat/completions", body, headers)


class AnthropicClient:
    """Anthropic's Messages API (DURABLERUNS_MODEL_API=anthropic): `system=`, `tools=`
    and `max_tokens=` (default 1024) pass through; DURABLERUNS_MODEL_URL is the base up
    to /v1 (https://api.anthropic.com/v1)."""

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        agent: str,
        step: str,
        idempotency_key: str,
        **params: Any,
    ) -> Any:
        body = {"model": model_name(params), "max_tokens": 1024, "messages": messages, **params}
        headers = {
            "x-api-key": settings.DURABLERUNS_MODEL_API_KEY,
            "anthropic-version": "2023-06-01",
            "Idempotency-Key": idempotency_key,
        }
        return _post("messages", body, headers)


# --- What a run spends ----------------------------------------------------------------


@dataclass
class Spend:
    """Tokens and dollars a run spent on model calls it really made (replayed steps and
    steps a fork copied cost nothing again)."""

    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    cost: Decimal = Decimal(0)

    @classmethod
    def of(cls, steps: Any) -> Spend:
        """What the run's own executor passes spent on these steps: a step copied by a
        fork or an import (lease_number 0) was spent by another run."""
        spend = cls()
        for step in steps:
            if step.kind == "llm" and getattr(step, "lease_number", 1) and step.error is None:
                spend.add(Reply.from_record(step.result if isinstance(step.result, dict) else {}))
        return spend

    def add(self, reply: Reply) -> None:
        self.tokens_in += reply.usage.prompt_tokens
        self.tokens_out += reply.usage.completion_tokens
        self.tokens_cached += reply.usage.cached_tokens
        self.cost += reply.usage.cost or 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def fields(self) -> dict[str, Any]:
        """The run row's totals, absolute: any pass may write them again."""
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens_cached": self.tokens_cached,
            "cost": self.cost,
        }
