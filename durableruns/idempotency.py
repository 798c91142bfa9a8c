"""Idempotency-Key semantics for your own Django views (IETF httpapi draft, Stripe style).

    @require_POST
    @idempotent(scope="refunds")
    def create_refund(request): ...

- no key, where required: 400;
- the same key with a different request (method, path, body): 422;
- the same key while the first request is still being handled: 409;
- the same key after it completed: the stored status and body, replayed, with
  `Idempotent-Replayed: true`.
The request fingerprint is the method, the full path (query string included) and
the body, so a key reused for another request is refused, never answered with
another request's response.

Retention: a key is kept for DURABLERUNS_IDEMPOTENCY_RETENTION seconds (default
7 days, longer than any run's time budget and than any client's retry window).
After that the same key is a new request. Expired records are deleted by
`prune_idempotency_records()`, which Celery beat runs every
DURABLERUNS_IDEMPOTENCY_PRUNE_INTERVAL seconds (default 1 hour); a request that
meets an expired record of its own key deletes it first, so retention holds
even between prunes.
Server errors (5xx) and exceptions are not stored, so the client may retry them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from .models import IdempotencyRecord

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600

View = Callable[..., HttpResponse]


def retention() -> timedelta:
    return timedelta(
        seconds=getattr(settings, "DURABLERUNS_IDEMPOTENCY_RETENTION", DEFAULT_RETENTION_SECONDS)
    )


def request_fingerprint(request: HttpRequest) -> str:
    digest = hashlib.sha256()
    for part in (request.method or "", request.get_full_path(), request.body):
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _problem(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"title": detail, "status": status}, status=status,
                        content_type="application/problem+json")


def idempotent(scope: str, *, required: bool = True) -> Callable[[View], View]:
    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
            key = request.headers.get(HEADER, "")
            if not key:
                if required:
                    return _problem(400, f"the {HEADER} header is required")
                return view(request, *args, **kwargs)
            if len(key) > MAX_KEY_LENGTH:
                return _problem(400, f"{HEADER} is longer than {MAX_KEY_LENGTH} characters")
            return _handle(view, scope, key, request, *args, **kwargs)

        return wrapper

    return decorate


def _handle(view: View, scope: str, key: str, request: HttpRequest, *args: object,
            **kwargs: object) -> HttpResponse:
    fingerprint = request_fingerprint(request)
    record, claimed = _claim(scope, key, fingerprint)
    if not claimed:
        return _answer_repeat(record, fingerprint)
    try:
        response = view(request, *args, **kwargs)
    except BaseException:
        record.delete()
        raise
    if response.status_code >= 500 or getattr(response, "streaming", False):
        record.delete()
        return response
    record.state = IdempotencyRecord.State.COMPLETED
    record.response_status = response.status_code
    record.response_body = response.content
    record.response_content_type = response.get("Content-Type", "")
    record.save(update_fields=["state", "response_status", "response_body",
                               "response_content_type"])
    return response


def _claim(scope: str, key: str, fingerprint: str) -> tuple[IdempotencyRecord, bool]:
    """Insert the in-flight record; the unique constraint lets exactly one request win."""
    IdempotencyRecord.objects.filter(
        scope=scope, key=key, created_at__lt=timezone.now() - retention()
    ).delete()
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(scope=scope, key=key,
                                                      fingerprint=fingerprint)
        return record, True
    except IntegrityError:
        existing = IdempotencyRecord.objects.filter(scope=scope, key=key).first()
        if existing is None:  # deleted between our insert and read: the first one failed
            return _claim(scope, key, fingerprint)
        return existing, False


def _answer_repeat(record: IdempotencyRecord, fingerprint: str) -> HttpResponse:
    if record.fingerprint != fingerprint:
        return _problem(422, "this Idempotency-Key was used with a different request")
    if record.state == IdempotencyRecord.State.IN_FLIGHT:
        response = _problem(409, "a request with this Idempotency-Key is still in progress")
        response["Retry-After"] = "1"
        return response
    response = HttpResponse(bytes(record.response_body or b""), status=record.response_status,
                            content_type=record.response_content_type)
    response["Idempotent-Replayed"] = "true"
    return response


def prune_idempotency_records() -> int:
    """Delete records older than the retention; returns how many went."""
    cutoff = timezone.now() - retention()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
