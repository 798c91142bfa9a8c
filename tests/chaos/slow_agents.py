"""A native agent whose one write takes longer than several sweep intervals and than
the lease TTL (a slow provider). Imported by the workers of test_native_liveness.py."""

from __future__ import annotations

import os
import time

import httpx
from django.conf import settings

import durableruns as dr


@dr.tool(kind=dr.UNSAFE_WRITE)
def slow_email(to: str, *, idempotency_key: str) -> dict:
    time.sleep(float(os.environ.get("SLOW_SEND_SECONDS", "0")))
    response = httpx.post(
        f"{settings.DURABLERUNS_PROVIDER_URL}/providers/email/none",
        json={"to": to},
        headers={"Idempotency-Key": idempotency_key},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


@dr.agent("slow-email", version="1", max_steps=5)
def slow_email_agent(run: dr.Run, task: dict) -> dict:
    return run.call(slow_email, to=task["to"])
