"""The one validation layer for what a request carries: text, dates, integers, JSON.

`InputValidationMiddleware` refuses, before any view runs, a request whose path, query
string, form fields, cookies or JSON body hold text no page or API can store or look
up: NUL (Postgres refuses it), lone surrogates (unencodable), text longer than
MAX_TEXT, JSON nested deeper than MAX_JSON_DEPTH (a recursion bomb). Views then read
typed values (`moment`, `integer`) with the helpers below, which raise `InvalidInput`:
a 400, rendered as JSON problem details under /api/ and as the site's error page
elsewhere. So malformed input is a clear 4xx, never a 500 and never a half-written row.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, UnreadablePostError
from django.shortcuts import render
from django.utils.dateparse import parse_datetime

MAX_TEXT = 2048  # a query value or a form field (but not a JSON body's strings)
MAX_PATH = 1024
MAX_JSON_DEPTH = 64
MAX_FORM_TEXT = 100_000  # a comment or a pasted result; the body limit bounds it too
# Dates a person or a cursor could mean; far enough from datetime's limits that
# converting between time zones and adding a day never overflows.
EARLIEST, LATEST = datetime(1900, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)
_DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII only: str.isdigit() accepts "²"
_SURROGATE = re.compile("[\ud800-\udfff]")
log = logging.getLogger(__name__)


class InvalidInput(BadRequest):
    """A request parameter that is malformed; answered with 400 naming the parameter."""

    def __init__(self, field: str, problem: str) -> None:
        field = field[:64]  # a parameter's name is the client's text too
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


def check_text(value: str, field: str, *, max_length: int = MAX_TEXT) -> str:
    if "\x00" in value:
        raise InvalidInput(field, "contains a NUL character")
    if _SURROGATE.search(value):
        raise InvalidInput(field, "is not valid Unicode (lone surrogate)")
    if len(value) > max_length:
        raise InvalidInput(field, f"is longer than {max_length} characters")
    return value


def moment(value: str, field: str) -> datetime:
    """An ISO 8601 date-time, read as UTC without an offset, between EARLIEST and LATEST."""
    check_text(value, field, max_length=64)
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidInput(field, "is not a date and time (YYYY-MM-DDTHH:MM)")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        in_utc = parsed.astimezone(UTC)
    except OverflowError:
        in_utc = None
    if in_utc is None or not EARLIEST <= in_utc <= LATEST:
        raise InvalidInput(field, f"must be between {EARLIEST:%Y} and {LATEST:%Y}")
    return in_utc


def integer(value: str, field: str, *, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    if not _DIGITS.fullmatch(value.strip().lstrip("-")):
        raise InvalidInput(field, "is not a whole number")
    number = int(value.strip())
    if not minimum <= number <= maximum:
        raise InvalidInput(field, f"must be between {minimum} and {maximum}")
    return number


def check_json(data: Any, field: str = "body") -> Any:
    """Depth and strings of parsed JSON, walked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            check_text(value, field, max_length=10**9)
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(field, "holds NaN or Infinity, which JSON does not allow")
        elif isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise InvalidInput(field, f"is nested deeper than {MAX_JSON_DEPTH} levels")
            items: Iterable[Any] = value.items() if isinstance(value, dict) else value
            for item in items:
                if isinstance(item, tuple):
                    stack.append((item[0], depth))
                    item = item[1]
                stack.append((item, depth + 1))
    return data


def parse_json(raw: bytes | str, field: str = "body") -> Any:
    """JSON text, refused if it is not JSON or fails check_json."""
    try:
        return check_json(json.loads(raw), field)
    except RecursionError:
        raise InvalidInput(field, f"is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(field, f"is not valid JSON: {exc}"[:300]) from None


# --- The middleware -------------------------------------------------------------------


def problem(request: HttpRequest, status: int, title: str, detail: str) -> HttpResponse:
    """An error answer: RFC 9457 problem details under /api/, the site's page elsewhere."""
    if request.path_info.startswith("/api/"):
        body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
        response = JsonResponse(body, status=status, content_type="application/problem+json")
    else:
        context = {"status": status, "title": title, "detail": detail}
        response = render(request, "errors/error.html", context, status=status)
    # Logged here, shortened: Django would log the whole path, which is the client's
    # text and may be kilobytes long.
    log.warning("%s %s: %s", status, request.path_info[:200], detail[:200])
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def _check_body_complete(request: HttpRequest) -> None:
    """A body shorter than its Content-Length: the client stopped (or was killed) after
    its headers. WSGI servers pass the short body on as if it were whole, and a view
    acts on it: an empty one parsed as `{}` and executed, and under an Idempotency-Key
    it took the key, so the client's retry was refused as "a different request"."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if not declared:
        return
    if not (declared.isascii() and declared.isdigit()):
        # "²" passes isdigit() and not int(); "١٢" passes both, and Django would read it
        raise InvalidInput("Content-Length", "is not a number of bytes")
    try:
        received, expected = len(request.body), int(declared)
    except UnreadablePostError:  # gunicorn raises where Django's own server returns less
        raise InvalidInput("the request body", "ended before its Content-Length") from None
    if received < expected:
        raise InvalidInput("the request body", f"ended after {received} of {expected} bytes")


class InputValidationMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            _check_request(request)
        except InvalidInput as exc:
            return problem(request, 400, "Bad Request", str(exc))
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, InvalidInput):
            return problem(request, 400, "Bad Request", str(exception))
        return None


def _check_request(request: HttpRequest) -> None:
    check_text(request.path_info, "path", max_length=MAX_PATH)
    for name, values in request.GET.lists():
        check_text(name, "query parameter name")
        for value in values:
            check_text(value, name)
    for name, value in request.COOKIES.items():
        check_text(f"{name}{value}", "cookie")
    content_type = request.content_type or ""
    if request.method not in {"POST", "PUT", "PATCH", "DELETE"}:
        return
    _check_body_complete(request)
    if content_type in {"application/x-www-form-urlencoded", "multipart/form-data"} and not (
        request.path_info.startswith("/api/")  # DRF reads (and refuses) forms itself
    ):
        for name, values in request.POST.lists():
            check_text(name, "form field name")
            for value in values:
                check_text(value, name, max_length=MAX_FORM_TEXT)
    elif content_type.endswith("json") and request.body:
        parse_json(request.body)
