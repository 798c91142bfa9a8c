"""API tokens: issued once in clear, stored as a digest, with an expiry, a last-used
time and revocation. The clear token reads `dr_<prefix>_<secret>`."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from ..models import ApiToken
from . import audit

DEFAULT_DAYS = 90
MAX_DAYS = 3650
# last_used_at is written at most this often per token, not on every request.
TOUCH_EVERY = timedelta(minutes=1)
_SHAPE = re.compile(r"dr_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue(user: Any, *, name: str = "", days: int = DEFAULT_DAYS, actor: Any = None) -> str:
    """A new token for `user`; the clear text is returned once and never stored.
    `actor` is who issued it (None: the system, e.g. a management command)."""
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"a token lives 1 to {MAX_DAYS} days")
    prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    token = f"dr_{prefix}_{secret}"
    with transaction.atomic():
        row = ApiToken.objects.create(
            user=user,
            name=name[:100],
            prefix=prefix,
            digest=_digest(token),
            expires_at=timezone.now() + timedelta(days=days),
        )
        audit.record(actor, "token.issue", row, after={"user": user.username, "days": days})
    return token


def authenticate(token: str) -> ApiToken | None:
    """The live token row for a clear token, or None (unknown, expired, revoked)."""
    shape = _SHAPE.fullmatch(token)
    if shape is None:
        return None
    row = ApiToken.objects.select_related("user").filter(prefix=shape[1]).first()
    if row is None or not hmac.compare_digest(row.digest, _digest(token)):
        return None
    now = timezone.now()
    if row.revoked_at is not None or row.expires_at <= now:
        return None
    if row.last_used_at is None or row.last_used_at < now - TOUCH_EVERY:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now
    return row


def of_user(user: Any) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at")


def live() -> Q:
    return Q(revoked_at__isnull=True, expires_at__gt=timezone.now())


def revoke(prefix: str, *, actor: Any = None) -> bool:
    """Revoke a token by its prefix; revoking it again is harmless (False)."""
    row = ApiToken.objects.filter(prefix=prefix).first()
    if row is None:
        return False
    with transaction.atomic():
        done = ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if done:
            audit.record(actor, "token.revoke", row, after={"user": row.user.username})
    return bool(done)
