"""A write whose provider executed but whose return value cannot be stored (a datetime).
Imported by the workers of tests/chaos/test_unstorable_write.py."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
from django.conf import settings

import durableruns as dr


@dr.tool(kind=dr.UNSAFE_WRITE)
def email_with_timestamp(to: str, *, idempotency_key: str) -> dict:
    response = httpx.post(
        f"{settings.DURABLERUNS_PROVIDER_URL}/providers/email/none",
        json={"to": to},
        headers={"Idempotency-Key": idempotency_key},
        timeout=10,
    )
    response.raise_for_status()
    return {**response.json(), "sent_at": datetime.now(UTC)}  # the author's mistake


@dr.agent("unstorable-email", version="1", max_steps=5)
def unstorable_email(run: dr.Run, task: dict) -> dict:
    sent = run.call(email_with_timestamp, to=task["to"])
    return {"message_id": sent["message_id"]}
