"""Model clients. The engine records every reply, so a client is called once per step.

A client has one method, `complete(messages=..., agent=..., step=...,
idempotency_key=..., **params) -> {"content": str, "usage": {...}}`, and raises
TransientError for rate limits and server errors, PermanentError otherwise.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx
from django.conf import settings
from django.utils.module_loading import import_string

from .errors import ModelRecoverableError, PermanentError, TransientError


class ModelClient(Protocol):
    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        agent: str,
        step: str,
        idempotency_key: str,
        **params: Any,
    ) -> dict[str, Any]: ...


def get_client() -> ModelClient:
    if settings.DURABLERUNS_MODEL_URL:
        return OpenAICompatibleClient()
    default = "durableruns.demo.model.ScriptedModel"
    return import_string(getattr(settings, "DURABLERUNS_MODEL_CLIENT", default))()


class OpenAICompatibleClient:
    """Chat completions against any OpenAI-compatible endpoint. No retries here:
    the engine is the one retry layer."""

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        agent: str,
        step: str,
        idempotency_key: str,
        **params: Any,
    ) -> dict[str, Any]:
        body = {"model": settings.DURABLERUNS_MODEL_NAME, "messages": messages, **params}
        headers = {
            "Authorization": f"Bearer {settings.DURABLERUNS_MODEL_API_KEY}",
            "Idempotency-Key": idempotency_key,
        }
        try:
            response = httpx.post(
                f"{settings.DURABLERUNS_MODEL_URL.rstrip('/')}/chat/completions",
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
        data = response.json()
        return {"content": data["choices"][0]["message"]["content"], "usage": data.get("usage", {})}
