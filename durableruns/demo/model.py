"""Scripted, deterministic stand-ins for a paid model API.

ScriptedModel answers in-process from a script keyed by (agent, step). The HTTP
endpoints (`/providers/v1/chat/completions`, OpenAI-compatible, and
`/providers/v1/messages`, Anthropic's Messages API) play a tool-calling model: asked
with `tools`, the first turn calls every tool at once (arguments from each schema's
`default`s), and once the results are back it answers with a summary of them. Both
record every completion they really produce, so tests can assert that each model
step was called exactly once across crashes and resumes.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ..validation import InvalidInput, parse_json
from .models import ModelCall


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def _refund_plan(messages: list[dict[str, Any]]) -> str:
    return json.dumps({"actions": ["lookup_order", "refund", "send_email"]})


def _research_plan(messages: list[dict[str, Any]]) -> str:
    topic = _last_user_text(messages)
    return json.dumps(
        {
            "queries": [
                f"{topic} checkpointing",
                f"{topic} idempotency keys",
                f"{topic} backoff jitter",
            ]
        }
    )


SCRIPT = {
    ("refund-bot", "plan"): _refund_plan,
    ("refund-bot", "summary"): lambda m: f"Refunded the order. {_last_user_text(m)}",
    ("research-bot", "plan"): _research_plan,
    ("research-bot", "draft"): lambda m: f"Draft report. {_last_user_text(m)}",
    ("research-bot", "critique"): lambda m: "The draft is accurate; tighten the introduction.",
    ("research-bot", "final"): lambda m: f"Final report. {_last_user_text(m)[:200]}",
}


class ScriptedModel:
    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        agent: str,
        step: str,
        idempotency_key: str,
        **params: Any,
    ) -> dict[str, Any]:
        ModelCall.objects.create(agent=agent, step=step, idempotency_key=idempotency_key)
        if params.get("tools"):  # a tool-calling agent: play the tool-calling model
            message = tool_calling_message(messages, params["tools"])
            return {
                "model": "scripted-demo",
                "choices": [{"message": message, "finish_reason": _finish_reason(message)}],
                "usage": {"prompt_tokens": _words(messages), "completion_tokens": 7},
            }
        answer = SCRIPT.get((agent, step), lambda m: f"ok: {_last_user_text(m)[:200]}")
        content = answer(messages)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        return {
            "content": content,
            "model": "scripted-demo",
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split())},
        }


def _words(messages: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m.get("content", "")).split()) for m in messages)


def _arguments(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: spec.get("default", "") for name, spec in sorted(properties.items())}


def _tool_turn(messages: list[dict[str, Any]]) -> bool:
    """Has the model asked for tools already (the conversation holds their results)?"""
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool":
            return True
        if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
            return True
    return False


def _answer(messages: list[dict[str, Any]]) -> str:
    results = [m["content"] for m in messages if m.get("role") == "tool"]
    for message in messages:
        if isinstance(message.get("content"), list):
            results += [b["content"] for b in message["content"] if b.get("type") == "tool_result"]
    return "Done. " + " ".join(str(r) for r in results)


def tool_calling_message(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """The assistant message (OpenAI shape): every tool called at once on the first
    turn, then an answer from their results."""
    if not tools or _tool_turn(messages):
        return {"role": "assistant", "content": _answer(messages)}
    calls = [
        {
            "id": f"call_{index}",
            "type": "function",
            "function": {
                "name": tool["function"]["name"],
                "arguments": json.dumps(_arguments(tool["function"]["parameters"])),
            },
        }
        for index, tool in enumerate(tools)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _finish_reason(message: dict[str, Any]) -> str:
    return "tool_calls" if "tool_calls" in message else "stop"


def _record_call(request: HttpRequest) -> None:
    key = request.headers.get("Idempotency-Key", "")
    step = key.split(":")[1] if key.count(":") >= 2 else ""
    ModelCall.objects.create(agent="http", step=step, idempotency_key=key)


def _body(request: HttpRequest) -> dict[str, Any] | None:
    """The request's JSON object, or None for anything a model API would refuse (a form
    body, which the middleware has already read, is not a chat request)."""
    if "json" not in request.content_type:
        return None
    try:
        body = parse_json(request.body or b"{}")
    except InvalidInput:
        return None
    return body if isinstance(body, dict) and isinstance(body.get("messages"), list) else None


@csrf_exempt
@login_not_required
@require_POST
def chat_completions(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    if body is None:
        return JsonResponse({"error": {"message": "messages must be a list"}}, status=400)
    messages = body["messages"]
    message = tool_calling_message(messages, body.get("tools") or [])
    _record_call(request)
    prompt = _words(messages)
    cached = _words(messages[:-1])  # the conversation so far, as a provider's cache would hold
    return JsonResponse(
        {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "model": f"{body.get('model', 'scripted')}-2024-07-18",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": _finish_reason(message),
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 7,
                "total_tokens": prompt + 7,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


@csrf_exempt
@login_not_required
@require_POST
def messages(request: HttpRequest) -> JsonResponse:
    """Anthropic's Messages API: tool calls are `tool_use` content blocks."""
    body = _body(request)
    if body is None:
        return JsonResponse({"type": "error", "error": {"message": "bad request"}}, status=400)
    turns, tools = body["messages"], body.get("tools") or []
    blocks: list[dict[str, Any]] = [{"type": "text", "text": _answer(turns)}]
    if tools and not _tool_turn(turns):
        blocks = [{"type": "text", "text": "Let me look."}] + [
            {
                "type": "tool_use",
                "id": f"toolu_{index}",
                "name": tool["name"],
                "input": _arguments(tool["input_schema"]),
            }
            for index, tool in enumerate(tools)
        ]
    _record_call(request)
    cached = _words(turns[:-1])
    return JsonResponse(
        {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": blocks,
            "stop_reason": "tool_use" if len(blocks) > 1 else "end_turn",
            "usage": {
                "input_tokens": _words(turns) - cached,
                "cache_read_input_tokens": cached,
                "output_tokens": 7,
            },
        }
    )
