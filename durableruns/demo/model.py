"""A scripted, deterministic stand-in for a paid model API.

It answers from a script keyed by (agent, step), and records every completion it
really produces, so tests can assert that each model step was called exactly once
across crashes and resumes.
"""

from __future__ import annotations

import json
from typing import Any

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
        answer = SCRIPT.get((agent, step), lambda m: f"ok: {_last_user_text(m)[:200]}")
        content = answer(messages)
        ModelCall.objects.create(agent=agent, step=step, idempotency_key=idempotency_key)
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        return {
            "content": content,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content.split())},
        }
