"""Local stand-ins for a payments service, an email service and an order database.

They are real HTTP endpoints storing their state in the database, and they count
every execution, so a person (or a test) can see "the provider charged once".
Each write provider runs in one of three modes, chosen per tool:
- `dedupe`: deduplicates by Idempotency-Key (the durableruns.idempotency helper);
- `lookup`: executes every request, but answers GET .../lookup/<key>;
- `none`: executes every request and offers no way to ask (truly unsafe).
A request may ask for `fail_first: N` injected 503s per key, to exercise retries.
"""

from __future__ import annotations

import hashlib
import json

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from ..idempotency import idempotent
from .models import ProviderCall

MODES = ("dedupe", "lookup", "none")
PROVIDERS = ("payments", "email")


def _parse(request: HttpRequest) -> dict | None:
    try:
        payload = json.loads(request.body or b"{}")
    except json.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def _execute(request: HttpRequest, provider: str, mode: str) -> HttpResponse:
    if provider not in PROVIDERS or mode not in MODES:
        return JsonResponse({"error": f"no provider {provider}/{mode}"}, status=404)
    payload = _parse(request)
    if payload is None:
        return JsonResponse({"error": "body must be a JSON object"}, status=400)
    key = request.headers.get("Idempotency-Key", "")
    rejected = ProviderCall.objects.filter(
        provider=provider, idempotency_key=key, outcome=ProviderCall.Outcome.REJECTED
    ).count()
    if rejected < int(payload.get("fail_first", 0)):
        ProviderCall.objects.create(
            provider=provider,
            mode=mode,
            idempotency_key=key,
            payload=payload,
            outcome=ProviderCall.Outcome.REJECTED,
        )
        return JsonResponse({"error": "temporarily unavailable"}, status=503)
    response = _respond(provider, key, payload)
    ProviderCall.objects.create(
        provider=provider, mode=mode, idempotency_key=key, payload=payload, response=response
    )
    if payload.get("lose_answer"):
        # Executed, but the answer is lost on its way back, as behind a timing-out gateway.
        return JsonResponse({"error": "gateway timeout"}, status=504)
    return JsonResponse(response, status=201)


def _respond(provider: str, key: str, payload: dict) -> dict:
    reference = hashlib.sha256(f"{provider}:{key}".encode()).hexdigest()[:12]
    if provider == "payments":
        return {
            "refund_id": f"re_{reference}",
            "status": "succeeded",
            "order_id": payload.get("order_id"),
            "cents": payload.get("cents"),
        }
    return {"message_id": f"msg_{reference}", "status": "sent", "to": payload.get("to")}


@csrf_exempt  # a machine-to-machine API authenticated by its callers' keys, not a form
@login_not_required
@require_POST
@idempotent(scope="demo-provider")
def execute_deduplicated(request: HttpRequest, provider: str) -> HttpResponse:
    return _execute(request, provider, "dedupe")


@csrf_exempt
@login_not_required
@require_POST
def execute_plain(request: HttpRequest, provider: str, mode: str) -> HttpResponse:
    if not request.headers.get("Idempotency-Key"):
        return JsonResponse({"error": "Idempotency-Key header required"}, status=400)
    return _execute(request, provider, mode)


@login_not_required
@require_GET
def lookup(request: HttpRequest, provider: str, key: str) -> HttpResponse:
    call = (
        ProviderCall.objects.filter(
            provider=provider, idempotency_key=key, outcome=ProviderCall.Outcome.EXECUTED
        )
        .order_by("id")
        .first()
    )
    if call is None:
        return JsonResponse({"error": "no such request"}, status=404)
    return JsonResponse(call.response)


ORDERS = {
    "A-1001": {"id": "A-1001", "customer": "ada@example.com", "cents": 4_500, "item": "kettle"},
    "A-1002": {"id": "A-1002", "customer": "grace@example.com", "cents": 25_000, "item": "bike"},
    "A-1003": {"id": "A-1003", "customer": "linus@example.com", "cents": 1_299, "item": "mug"},
}


@login_not_required
@require_GET
def order(request: HttpRequest, order_id: str) -> HttpResponse:
    found = ORDERS.get(order_id)
    if found is None:
        return JsonResponse({"error": f"no order {order_id}"}, status=404)
    return JsonResponse(found)


ARTICLES = [
    {"id": "a1", "title": "Checkpointing long-running jobs", "words": 1200},
    {"id": "a2", "title": "Idempotency keys in payment APIs", "words": 900},
    {"id": "a3", "title": "Backoff with jitter", "words": 700},
    {"id": "a4", "title": "Leases and fencing tokens", "words": 1500},
]


@login_not_required
@require_GET
def search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").lower()
    words = set(query.split())
    hits = [a for a in ARTICLES if words & set(a["title"].lower().split())] or ARTICLES[:2]
    return JsonResponse({"query": query, "hits": hits})
