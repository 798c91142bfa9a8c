"""Demo tools: HTTP calls to the stand-in providers, with honest error classification.

There is no retry here: the engine is the one retry layer. The same write is
offered three ways, one per provider behaviour, so the crash matrix can show what
each kind of provider needs.
"""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

import durableruns as dr

TIMEOUT = httpx.Timeout(10.0, connect=2.0)


def _url(path: str) -> str:
    return f"{settings.DURABLERUNS_PROVIDER_URL.rstrip('/')}/providers/{path}"


def _send(method: str, path: str, key: str, body: dict | None = None) -> httpx.Response:
    try:
        return httpx.request(
            method, _url(path), json=body, timeout=TIMEOUT, headers={"Idempotency-Key": key}
        )
    except httpx.ConnectError as exc:
        raise dr.TransientError(f"provider unreachable: {exc}") from None
    except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        # The request may have reached the provider: the outcome is unknown.
        raise dr.AmbiguousOutcome(f"no answer from provider: {exc!r}") from None


def _answer(response: httpx.Response) -> Any:
    status = response.status_code
    if status == 504:
        # A gateway gave up waiting: the provider may have executed the request.
        raise dr.AmbiguousOutcome("the provider's gateway timed out (504)")
    if status in (409, 429) or status >= 500:
        raise dr.TransientError(f"provider answered {status}")
    if status == 422:
        raise dr.PermanentError("provider refused: key reused with a different request")
    if status == 400:
        raise dr.ModelRecoverableError(f"provider rejected the request: {response.text[:200]}")
    if status >= 400:
        raise dr.PermanentError(f"provider answered {status}: {response.text[:200]}")
    return response.json()


def _write(provider: str, mode: str, key: str, body: dict) -> dict:
    path = f"{provider}/{mode}"
    return _answer(_send("POST", path, key, body))


def _lookup(provider: str, key: str) -> dict | None:
    response = _send("GET", f"{provider}/lookup/{key}", key)
    if response.status_code == 404:
        return None
    return _answer(response)


@dr.tool(kind=dr.READ_ONLY)
def lookup_order(order_id: str, *, idempotency_key: str) -> dict:
    return _answer(_send("GET", f"orders/{order_id}", idempotency_key))


@dr.tool(kind=dr.READ_ONLY)
def search_articles(query: str, *, idempotency_key: str) -> dict:
    try:
        response = httpx.get(_url("search"), params={"q": query}, timeout=TIMEOUT)
    except httpx.HTTPError as exc:
        raise dr.TransientError(f"search unreachable: {exc}") from None
    return _answer(response)


# --- Refunds: the same write against the three provider behaviours -----------


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def refund(order_id: str, cents: int, fail_first: int = 0, *, idempotency_key: str) -> dict:
    body = {"order_id": order_id, "cents": cents, "fail_first": fail_first}
    return _write("payments", "dedupe", idempotency_key, body)


@dr.tool(kind=dr.UNSAFE_WRITE)
def refund_with_lookup(
    order_id: str, cents: int, fail_first: int = 0, *, idempotency_key: str
) -> dict:
    body = {"order_id": order_id, "cents": cents, "fail_first": fail_first}
    return _write("payments", "lookup", idempotency_key, body)


@refund_with_lookup.reconcile
def find_refund(
    order_id: str, cents: int, fail_first: int = 0, *, idempotency_key: str
) -> dict | None:
    return _lookup("payments", idempotency_key)


@dr.tool(kind=dr.UNSAFE_WRITE)
def refund_unsafe(
    order_id: str,
    cents: int,
    fail_first: int = 0,
    lose_answer: bool = False,
    *,
    idempotency_key: str,
) -> dict:
    body = {"order_id": order_id, "cents": cents, "fail_first": fail_first}
    if lose_answer:  # the demo's escalation: the provider refunds, its answer is lost
        body["lose_answer"] = True
    return _write("payments", "none", idempotency_key, body)


def _sandbox_refund(
    order_id: str,
    cents: int,
    fail_first: int = 0,
    lose_answer: bool = False,
    *,
    idempotency_key: str,
) -> dict:
    # What a sandboxed fork gets back: shaped like the provider's answer, marked as not real.
    return {"refund_id": "re_sandbox", "status": "sandboxed", "order_id": order_id, "cents": cents}


for _tool in (refund, refund_with_lookup, refund_unsafe):
    _tool.sandbox(_sandbox_refund)


REFUND_TOOLS = {"dedupe": refund, "lookup": refund_with_lookup, "none": refund_unsafe}


# --- Email, likewise ---------------------------------------------------------------


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict:
    return _write("email", "dedupe", idempotency_key, {"to": to, "subject": subject, "body": body})


@dr.tool(kind=dr.UNSAFE_WRITE)
def send_email_with_lookup(to: str, subject: str, body: str, *, idempotency_key: str) -> dict:
    return _write("email", "lookup", idempotency_key, {"to": to, "subject": subject, "body": body})


@send_email_with_lookup.reconcile
def find_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict | None:
    return _lookup("email", idempotency_key)


@dr.tool(kind=dr.UNSAFE_WRITE)
def send_email_unsafe(to: str, subject: str, body: str, *, idempotency_key: str) -> dict:
    return _write("email", "none", idempotency_key, {"to": to, "subject": subject, "body": body})


def _sandbox_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict:
    return {"message_id": "msg_sandbox", "status": "sandboxed", "to": to}


for _tool in (send_email, send_email_with_lookup, send_email_unsafe):
    _tool.sandbox(_sandbox_email)


EMAIL_TOOLS = {"dedupe": send_email, "lookup": send_email_with_lookup, "none": send_email_unsafe}
