"""The login page, throttled so that guessing is slow and nobody can lock out everyone.

Failures are counted per (username, client address) and per username, never per
address alone: many people share an address (an office, the TLS proxy), so a crowd
of failures for random usernames locks out no one. After DURABLERUNS_LOGIN_MAX_FAILURES
failures from one address for one username, that address may not try that username
again until the window (DURABLERUNS_LOGIN_WINDOW seconds from the first failure)
passes; after USER_FACTOR times as many from anywhere, the username is locked for
everyone (distributed guessing). The answer is a 429 with Retry-After.

Each attempt takes its slot atomically (Redis INCR) *before* the password is checked,
so concurrent guesses cannot all slip in under the limit. Counters live in the shared
cache, so every web process sees them. Behind proxies, DURABLERUNS_TRUSTED_PROXIES
says how many X-Forwarded-For entries (from the right) to trust.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

log = logging.getLogger(__name__)
USER_FACTOR = 4  # a username from anywhere may fail this many times the per-address limit
_login_view = auth_views.LoginView.as_view()


@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def login(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _login_view(request)
    username = request.POST.get("username", "")
    pair, user = _keys(username, client_address(request))
    limit = settings.DURABLERUNS_LOGIN_MAX_FAILURES
    over = [key for key, n in ((pair, limit), (user, limit * USER_FACTOR)) if _take(key) > n]
    if over:
        log.warning("login throttled for %r", username[:150])
        return _throttled(request, max(_seconds_left(key) for key in over))
    response = _login_view(request)
    if response.status_code == 302:  # the right password: this attempt was no failure
        cache.delete_many([pair, user, f"{pair}:since", f"{user}:since"])
    return response


def client_address(request: HttpRequest) -> str:
    """The address of the client: REMOTE_ADDR, or, behind N trusted proxies, the entry
    the outermost of them appended to X-Forwarded-For (entries further left are the
    client's own claims, and may be forged)."""
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.DURABLERUNS_TRUSTED_PROXIES
    forwarded = [
        entry.strip()
        for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if entry.strip()
    ]
    if proxies <= 0 or not forwarded:
        return remote
    return forwarded[-min(proxies, len(forwarded))][:64]


def failures(username: str, address: str) -> tuple[int, int]:
    """(failures of username from address, failures of username) in the current window."""
    pair, user = _keys(username, address)
    return int(cache.get(pair, 0)), int(cache.get(user, 0))


def forget(username: str, address: str) -> None:
    """Clear the failure counts of a username (tests, support staff)."""
    keys = _keys(username, address)
    cache.delete_many([*keys, *(f"{key}:since" for key in keys)])


def _keys(username: str, address: str) -> tuple[str, str]:
    user = _digest(username.strip().lower())
    return f"login-failures:pair:{user}:{_digest(address)}", f"login-failures:user:{user}"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def _take(key: str) -> int:
    """Count an attempt atomically; the window starts at the first one."""
    window = int(settings.DURABLERUNS_LOGIN_WINDOW)
    cache.add(f"{key}:since", time.time(), timeout=window)
    cache.add(key, 0, timeout=window)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr: a new window
        cache.add(key, 1, timeout=window)
        return 1


def _seconds_left(key: str) -> int:
    since = cache.get(f"{key}:since") or time.time()
    return max(1, math.ceil(since + settings.DURABLERUNS_LOGIN_WINDOW - time.time()))


def _throttled(request: HttpRequest, seconds: int) -> HttpResponse:
    minutes = math.ceil(seconds / 60)
    context = {
        "status": 429,
        "title": "Too many failed attempts",
        "detail": "Too many failed attempts for this username. Your password was not checked.",
        "retry_after_text": f"{minutes} minute{'s' if minutes != 1 else ''}",
        "retry_at": datetime.fromtimestamp(time.time() + seconds, tz=UTC),
    }
    response = render(request, "429.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response
