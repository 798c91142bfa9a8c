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

The view's database writes and the stored response commit in one transaction
(an exception rolls both back). So a request whose process died half-way leaves
only its in-flight claim: once that is older than DURABLERUNS_IDEMPOTENCY_LOCK_TIMEOUT
seconds (default 120, longer than any request may take), a retry with the same
request takes it over and executes. Should the first request still be running,
its completion finds the claim moved, rolls back and answers 409, so the writes
commit once. Effects outside the database (an SMTP send) cannot be rolled back:
such a view should itself be idempotent or keep its lock timeout generous.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from .models import IdempotencyRecord

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
DEFAULT_LOCK_TIMEOUT = 120.0

View = Callable[..., HttpResponse]


def lock_timeout() -> timedelta:
    return timedelta(
        seconds=getattr(settings, "DURABLERUNS_IDEMPOTENCY_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)
    )


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
    return JsonResponse(
        {"title": detail, "status": status}, status=status, content_type="application/problem+json"
    )


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


class _Superseded(Exception):
    """Rolls back a request whose claim was taken over while it ran."""


def _handle(
    view: View, scope: str, key: str, request: HttpRequest, *args: object, **kwargs: object
) -> HttpResponse:
    fingerprint = request_fingerprint(request)
    record, claimed = _claim(scope, key, fingerprint)
    if not claimed:
        return _answer_repeat(record, fingerprint)
    try:
        # The view's writes and the stored response commit together: a request that
        # dies half-way leaves only its claim, which a retry may take over later.
        with transaction.atomic():
            response = view(request, *args, **kwargs)
            if _storable(response) and not _complete(record, response):
                raise _Superseded
    except _Superseded:
        return _in_flight()
    except BaseException:
        _unclaim(record)
        raise
    if not _storable(response):
        _unclaim(record)  # a server error is not the answer: the client may retry
    return response


def _storable(response: HttpResponse) -> bool:
    return response.status_code < 500 and not getattr(response, "streaming", False)


def _complete(record: IdempotencyRecord, response: HttpResponse) -> bool:
    """Store the response if this request still holds the claim (nobody took it over)."""
    return bool(
        _claimed_by(record).update(
            state=IdempotencyRecord.State.COMPLETED,
            response_status=response.status_code,
            response_body=response.content,
            response_content_type=response.get("Content-Type", ""),
        )
    )


def _unclaim(record: IdempotencyRecord) -> None:
    _claimed_by(record).delete()


def _claimed_by(record: IdempotencyRecord) -> QuerySet[IdempotencyRecord]:
    # created_at is the claim's token: a takeover moves it.
    return IdempotencyRecord.objects.filter(
        pk=record.pk, created_at=record.created_at, state=IdempotencyRecord.State.IN_FLIGHT
    )


def _claim(scope: str, key: str, fingerprint: str) -> tuple[IdempotencyRecord, bool]:
    """Insert the in-flight record; the unique constraint lets exactly one request win."""
    IdempotencyRecord.objects.filter(
        scope=scope, key=key, created_at__lt=timezone.now() - retention()
    ).delete()
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(scope=scope, key=key, fingerprint=fingerprint)
        return record, True
    except IntegrityError:
        existing = IdempotencyRecord.objects.filter(scope=scope, key=key).first()
        if existing is None:  # deleted between our insert and read: the first one failed
            return _claim(scope, key, fingerprint)
        if existing.fingerprint == fingerprint and _take_over(existing):
            return existing, True
        return existing, False


def _take_over(record: IdempotencyRecord) -> bool:
    """Claim a request left in flight longer than the lock timeout (its process died).

    Safe because the abandoned request's writes commit only with its response: if it
    is in fact still running, its completion finds the claim moved and rolls back."""
    if record.state != IdempotencyRecord.State.IN_FLIGHT:
        return False
    if record.created_at >= timezone.now() - lock_timeout():
        return False
    now = timezone.now()
    if not _claimed_by(record).update(created_at=now):
        return False  # another retry took it first
    record.created_at = now
    return True


def _in_flight() -> HttpResponse:
    response = _problem(409, "a request with this Idempotency-Key is still in progress")
    response["Retry-After"] = "1"
    return response


def _answer_repeat(record: IdempotencyRecord, fingerprint: str) -> HttpResponse:
    if record.fingerprint != fingerprint:
        return _problem(422, "this Idempotency-Key was used with a different request")
    if record.state == IdempotencyRecord.State.IN_FLIGHT:
        return _in_flight()
    response = HttpResponse(
        bytes(record.response_body or b""),
        status=record.response_status,
        content_type=record.response_content_type,
    )
    response["Idempotent-Replayed"] = "true"
    return response


def prune_idempotency_records() -> int:
    """Delete records older than the retention; returns how many went."""
    cutoff = timezone.now() - retention()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
