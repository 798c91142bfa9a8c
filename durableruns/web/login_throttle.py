"""The login page, throttled: after DURABLERUNS_LOGIN_MAX_FAILURES failed attempts for
a username (or 4 times as many from one client address) within
DURABLERUNS_LOGIN_WINDOW seconds, further attempts are refused with 429 until the
window passes. Counters live in the shared cache (Redis in production), so every web
process sees them."""

from __future__ import annotations

import hashlib
import logging

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

log = logging.getLogger(__name__)
# Many people may share one address (an office, a proxy): it gets a larger allowance.
ADDRESS_FACTOR = 4
_login_view = auth_views.LoginView.as_view()


@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def login(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _login_view(request)
    keys = _keys(request.POST.get("username", ""), request.META.get("REMOTE_ADDR", ""))
    if _failures(keys[0]) >= settings.DURABLERUNS_LOGIN_MAX_FAILURES or (
        _failures(keys[1]) >= settings.DURABLERUNS_LOGIN_MAX_FAILURES * ADDRESS_FACTOR
    ):
        log.warning("login throttled for %s", request.POST.get("username", "")[:150])
        return render(
            request, "registration/login.html", {"throttled": True, "form": None}, status=429
        )
    response = _login_view(request)
    if response.status_code == 302:
        cache.delete(keys[0])  # a correct password clears that username's count
    else:
        for key in keys:
            _count_failure(key)
    return response


def _keys(username: str, address: str) -> list[str]:
    username = username.strip().lower()
    return [f"login-failures:user:{_digest(username)}", f"login-failures:addr:{_digest(address)}"]


def forget(username: str, address: str) -> None:
    """Clear the failure counts of a username and an address (tests, support staff)."""
    cache.delete_many(_keys(username, address))


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def _failures(key: str) -> int:
    return int(cache.get(key, 0))


def _count_failure(key: str) -> None:
    window = int(settings.DURABLERUNS_LOGIN_WINDOW)
    if not cache.add(key, 1, timeout=window):
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=window)
