"""The project's URLs plus test-only views guarded by @idempotent (see test_idempotency)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from durableruns.demo.models import ProviderCall
from durableruns.idempotency import idempotent

# What each view really did, per Idempotency-Key (the live server runs in threads).
EXECUTIONS: Counter = Counter()
_lock = threading.Lock()
# Set when a charge starts its pause: a test sends more requests while one is in flight.
CHARGING = threading.Event()
# Set by a test once a concurrent request was answered: a charge asked to pause
# `until_overlap` waits for it (at most its pause), whatever the machine's load.
OVERLAPPED = threading.Event()


def _executed(request: HttpRequest) -> int:
    with _lock:
        EXECUTIONS[request.headers.get("Idempotency-Key", "")] += 1
        return EXECUTIONS[request.headers.get("Idempotency-Key", "")]


@csrf_exempt
@login_not_required
@require_POST
@idempotent(scope="test-charges")
def charge(request: HttpRequest) -> HttpResponse:
    """Charge `amount`, slowly when asked; 402 above 1000, as a stored client error."""
    body = json.loads(request.body or b"{}")
    CHARGING.set()
    if body.get("until_overlap"):
        OVERLAPPED.wait(timeout=float(body.get("pause", 0)))
    else:
        time.sleep(float(body.get("pause", 0)))
    execution = _executed(request)
    if body.get("amount", 0) > 1000:
        return JsonResponse({"error": "card declined"}, status=402)
    return JsonResponse({"charge": f"ch_{execution}", "amount": body.get("amount")}, status=201)


@csrf_exempt
@login_not_required
@require_POST
@idempotent(scope="test-flaky")
def flaky(request: HttpRequest) -> HttpResponse:
    """Unavailable on its first execution of each key, fine afterwards."""
    if _executed(request) == 1:
        return JsonResponse({"error": "try again"}, status=503)
    return JsonResponse({"ok": True}, status=201)


@csrf_exempt
@login_not_required
@require_POST
@idempotent(scope="test-exploding")
def exploding(request: HttpRequest) -> HttpResponse:
    """Writes a row, then raises on its first execution of each key."""
    _write(request)
    if _executed(request) == 1:
        raise RuntimeError("the view crashed")
    return JsonResponse({"ok": True}, status=201)


@csrf_exempt
@login_not_required
@require_POST
@idempotent(scope="test-ledgered")
def ledgered(request: HttpRequest) -> HttpResponse:
    """Writes its effect to the database, then lingers for `pause` seconds."""
    body = json.loads(request.body or b"{}")
    _write(request)
    _executed(request)
    time.sleep(float(body.get("pause", 0)))
    return JsonResponse({"ok": True}, status=201)


def _write(request: HttpRequest) -> None:
    ProviderCall.objects.create(
        provider="test",
        mode="test",
        payload={},
        idempotency_key=request.headers.get("Idempotency-Key", ""),
    )


@csrf_exempt
@login_not_required
@require_POST
@idempotent(scope="test-optional", required=False)
def optional(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"execution": _executed(request)}, status=201)


urlpatterns = [
    path("test/charge", charge),
    path("test/flaky", flaky),
    path("test/exploding", exploding),
    path("test/optional", optional),
    path("test/ledgered", ledgered),
    path("", include("durableruns.urls")),
]
