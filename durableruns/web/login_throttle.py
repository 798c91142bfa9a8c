"""The login page, throttled: after DURABLERUNS_LOGIN_MAX_FAILURES failed attempts for
a username, or from one client address, within DURABLERUNS_LOGIN_WINDOW seconds,
further attempts are refused with 429 until the window passes. Counters live in the
shared cache (Redis in production), so every web process sees them."""

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
_login_view = auth_views.LoginView.as_view()


@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def login(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _login_view(request)
    keys = _keys(request)
    if any(_failures(key) >= settings.DURABLERUNS_LOGIN_MAX_FAILURES for key in keys):
        log.warning("login throttled for %s", request.POST.get("username", "")[:150])
        return render(request, "registration/login.html",
                      {"throttled": True, "form": None}, status=429)
    response = _login_view(request)
    if response.status_code == 302:
        cache.delete(keys[0])  # a correct password clears that username's count
    else:
        for key in keys:
            _count_failure(key)
    return response


def _keys(request: HttpRequest) -> list[str]:
    username = request.POST.get("username", "").strip().lower()
    address = request.META.get("REMOTE_ADDR", "")
    return [f"login-failures:user:{_digest(username)}", f"login-failures:addr:{_digest(address)}"]


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
