"""The login page, throttled so that guessing is slow and failures alone lock nobody out.

The design follows OWASP's "device cookies" (Authentication and Credential Stuffing
cheat sheets): a successful login leaves a signed cookie naming that username on that
browser, and attempts are counted in two separate worlds.

- From a **known browser** (a valid device cookie for the username tried), failures
  count against that one cookie: DURABLERUNS_LOGIN_MAX_FAILURES per window, then 429
  for that browser only. Nothing strangers do can lock the owner out of it.
- From **anywhere else**, failures count per (username, client address) (the same
  limit), per username (USER_FACTOR times it, against guessing spread over many
  addresses), and per address across usernames (DURABLERUNS_LOGIN_ADDRESS_MAX_FAILURES,
  against spraying random usernames: each costs a password hash).

So a username attacked from everywhere is locked only for unknown browsers, and an
address spraying usernames is refused before its passwords are hashed; from unknown
browsers an address has one password check in flight at a time, so however many
connections it opens, it makes the site hash on one core at most. The price: the
owner on a new browser waits out the window (the 429 says so), or signs in from a
browser they used before.

Usernames are counted as authentication sees them: stripped and NFKC-normalised by
Django's login form, and case-folded here too, so a fullwidth `carol`, `CAROL` and
` carol ` all count against `carol`. Each attempt takes its slots atomically (Redis INCR)
*before* the password is checked, so concurrent guesses cannot slip in under a limit.
Behind proxies, DURABLERUNS_TRUSTED_PROXIES says how many X-Forwarded-For entries
(from the right) to trust.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import secrets
import time
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.core import signing
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
USER_FACTOR = 4  # a username from anywhere may fail this many times the per-address limit
DEVICE_SALT = "durableruns.login.device"
DEVICE_AGE = 180 * 24 * 3600  # seconds a browser stays known after its last login
CHECK_CLAIM_SECONDS = 30  # far longer than one password hash; frees a dead process's claim


class _LoginView(auth_views.LoginView):
    def get_redirect_url(self) -> str:
        # The site's root is the address people type (and `make demo` prints), not a
        # page they asked for: each role lands on its own page instead (views.home).
        url = super().get_redirect_url()
        return "" if url == "/" else url


_login_view = _LoginView.as_view()
_REFUSALS = {
    "device": "Too many failed attempts from this browser for this username.",
    "pair": "Too many failed attempts for this username.",
    "username": "Too many failed attempts for this username.",
    "address": "Too many failed sign-ins from your network.",
    "busy": "Another sign-in from your network is being checked; try again in a moment.",
    "unavailable": "Sign-in is briefly unavailable: its attempt counters cannot be reached.",
}
UNAVAILABLE_RETRY_SECONDS = 30
_TITLES = {"busy": "Sign-in busy", "unavailable": "Sign-in unavailable"}


@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def login(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _login_view(request)
    try:
        return _counted_login(request)
    except RedisError:
        # Without its counters the throttle cannot limit guesses, so no password is
        # checked (fail closed: taking Redis down must not buy unlimited attempts).
        log.error("login refused: the attempt counters (Redis) are unavailable")
        return _throttled(request, "unavailable", UNAVAILABLE_RETRY_SECONDS)


def _counted_login(request: HttpRequest) -> HttpResponse:
    user = canonical(request.POST.get("username", ""))
    device = _known_device(request, user)
    address = client_address(request)
    with _one_check_per_address(address, device) as turn:
        if not turn:  # refused before counting anything: nothing was checked
            return _throttled(request, "busy", 1)
        slots = _slots(user, address, device)
        over = [(kind, key) for kind, key, limit in slots if _take(key) > limit]
        if over:
            log.warning("login throttled (%s) for user %s", over[0][0], user[:12])
            return _throttled(request, over[0][0], max(_seconds_left(key) for _, key in over))
        response = _login_view(request)
    if response.status_code == 302:  # the right password: this attempt was no failure
        _remember_device(response, user)
        with contextlib.suppress(RedisError):  # signed in already; slots expire anyway
            _forgive(slots)
    return response


@contextlib.contextmanager
def _one_check_per_address(address: str, device: str | None) -> Iterator[bool]:
    """Whether this attempt may check its password now: from a browser that does not
    know the username, one check per address at a time (a known browser always may).

    The address's budget caps how many hashes it makes the site compute; this caps how
    many at once, so a spray from many connections behind one address takes one core's
    worth of hashing at most, and everybody else's login stays about as fast as alone.
    The claim expires by itself should the process die holding it."""
    if device is not None:
        yield True
        return
    key, claim = f"login-checking:{_digest(address)}", secrets.token_hex(8)
    if not cache.add(key, claim, timeout=CHECK_CLAIM_SECONDS):
        yield False
        return
    try:
        yield True
    finally:
        # A claim that cannot be freed expires by itself (CHECK_CLAIM_SECONDS).
        with contextlib.suppress(RedisError):
            if cache.get(key) == claim:  # never another attempt's, should ours have expired
                cache.delete(key)


def canonical(username: str) -> str:
    """The digest of `username` as authentication sees it (strip, NFKC), case-folded."""
    name = unicodedata.normalize("NFKC", username.strip()).strip()
    return _digest(unicodedata.normalize("NFKC", name.casefold()))


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
    """(failures of username from address, of username from anywhere) this window,
    from browsers that do not know the username."""
    pair, user = _pair_key(canonical(username), address), _user_key(canonical(username))
    return int(cache.get(pair, 0)), int(cache.get(user, 0))


def address_failures(address: str) -> int:
    """Failures from address this window, whatever the username."""
    return int(cache.get(_address_key(address), 0))


def forget(username: str, address: str) -> None:
    """Clear the failure counts of a username and of an address (tests, support staff)."""
    user = canonical(username)
    keys = (_pair_key(user, address), _user_key(user), _address_key(address))
    cache.delete_many([*keys, *(f"{key}:since" for key in keys)])


def _slots(user: str, address: str, device: str | None) -> list[tuple[str, str, int]]:
    """(kind, counter, limit) that this attempt takes a slot in."""
    limit = settings.DURABLERUNS_LOGIN_MAX_FAILURES
    if device is not None:
        return [("device", f"login-failures:device:{device}", limit)]
    return [
        ("pair", _pair_key(user, address), limit),
        ("username", _user_key(user), limit * USER_FACTOR),
        ("address", _address_key(address), settings.DURABLERUNS_LOGIN_ADDRESS_MAX_FAILURES),
    ]


def _forgive(slots: list[tuple[str, str, int]]) -> None:
    """A success was no failure: it gives back its slots, and clears the count of its
    (username, address) or browser. The username's count from anywhere stays: the
    owner logging in must not hand distributed guessers a fresh allowance."""
    for kind, key, _ in slots:
        if kind in ("username", "address"):
            _give_back(key)
        elif kind in ("pair", "device"):
            cache.delete_many([key, f"{key}:since"])


def _known_device(request: HttpRequest, user: str) -> str | None:
    """The nonce of this browser's valid device cookie for `user`, if it has one."""
    value = request.COOKIES.get(_device_cookie(user), "")
    try:
        payload = signing.loads(value, salt=DEVICE_SALT, max_age=DEVICE_AGE)
    except signing.BadSignature:
        return None
    if not isinstance(payload, dict) or payload.get("u") != user:
        return None
    nonce = payload.get("n")
    return nonce if isinstance(nonce, str) and nonce.isalnum() else None


def _remember_device(response: HttpResponse, user: str) -> None:
    value = signing.dumps({"u": user, "n": secrets.token_hex(16)}, salt=DEVICE_SALT)
    response.set_cookie(
        _device_cookie(user),
        value,
        max_age=DEVICE_AGE,
        path=reverse("login"),
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Strict",
    )


def _device_cookie(user: str) -> str:
    # One cookie per username, so people sharing a browser each keep theirs.
    return f"login_device_{user[:16]}"


def _pair_key(user: str, address: str) -> str:
    return f"login-failures:pair:{user}:{_digest(address)}"


def _user_key(user: str) -> str:
    return f"login-failures:user:{user}"


def _address_key(address: str) -> str:
    return f"login-failures:address:{_digest(address)}"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode(errors="surrogatepass")).hexdigest()[:32]


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


def _give_back(key: str) -> None:
    with contextlib.suppress(ValueError):  # the window ended meanwhile: nothing to give
        cache.decr(key)


def _seconds_left(key: str) -> int:
    since = cache.get(f"{key}:since") or time.time()
    return max(1, math.ceil(since + settings.DURABLERUNS_LOGIN_WINDOW - time.time()))


def _throttled(request: HttpRequest, kind: str, seconds: int) -> HttpResponse:
    minutes = math.ceil(seconds / 60)
    plural = "s" * (minutes != 1)
    detail = f"{_REFUSALS[kind]} Your password was not checked."
    if kind not in ("device", "busy", "unavailable"):
        detail += " If this is your account, sign in from a browser you signed in with before."
    busy = kind in ("busy", "unavailable")
    status = 503 if kind == "unavailable" else 429
    context = {
        "status": status,
        "title": _TITLES.get(kind, "Too many failed attempts"),
        "detail": detail,
        "retry_after_text": "a second" if kind == "busy" else f"{minutes} minute{plural}",
        "retry_at": None if busy else datetime.fromtimestamp(time.time() + seconds, tz=UTC),
    }
    response = render(request, "429.html", context, status=status)
    response["Retry-After"] = str(seconds)
    return response
