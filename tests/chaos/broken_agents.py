"""An agent with a mistake crashtest must catch: a write declared idempotent at a
provider that does not deduplicate. Imported by the crashtest test's workers."""

from __future__ import annotations

import httpx
from django.conf import settings

import durableruns as dr


@dr.tool(kind=dr.IDEMPOTENT_WRITE)  # wrong: payments/none executes every request it gets
def refund_misdeclared(order_id: str, cents: int, *, idempotency_key: str) -> dict:
    response = httpx.post(
        f"{settings.DURABLERUNS_PROVIDER_URL}/providers/payments/none",
        json={"order_id": order_id, "cents": cents},
        headers={"Idempotency-Key": idempotency_key},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


@dr.agent("misdeclared-refund", version="1", max_steps=5)
def misdeclared_refund(run: dr.Run, task: dict) -> dict:
    receipt = run.call(refund_misdeclared, order_id=task["order_id"], cents=4500)
    return {"refund_id": receipt["refund_id"]}
