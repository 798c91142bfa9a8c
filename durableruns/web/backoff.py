"""Server-told back-off for live polls (issue 27).

Every web process counts the requests it is serving. While that count is at
DURABLERUNS_POLL_BUSY_AT or more:
- a live poll that says which version it shows (X-Live-Version: the run page, the
  inbox) is answered at once with 204, before any session or database work: the page
  keeps what it shows, as for "unchanged", and polls again later. Decisions and page
  loads then wait behind nothing heavier than these answers;
- every poll answer (an htmx GET) carries `X-Poll-Interval: <seconds>`
  (DURABLERUNS_POLL_BACKOFF_SECONDS), and the page waits that long before its next
  poll (static/durableruns/app.js).
A process's count is the load it can see: under gthread, the number of its threads at
work. Page loads and POSTs are never shed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from . import live

HEADER = "X-Poll-Interval"

_lock = threading.Lock()
_serving = 0


@contextmanager
def serving() -> Iterator[int]:
    """Count one request in flight; yields how many others this process is serving."""
    global _serving
    with _lock:
        others = _serving
        _serving += 1
    try:
        yield others
    finally:
        with _lock:
            _serving -= 1


class PollBackoffMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        is_poll = request.method == "GET" and request.headers.get("HX-Request") == "true"
        with serving() as others:
            busy = others >= settings.DURABLERUNS_POLL_BUSY_AT
            if busy and is_poll and request.headers.get(live.HEADER):
                response = HttpResponse(status=204)  # shed: the page keeps what it shows
            else:
                response = self.get_response(request)
        if busy and is_poll:
            response[HEADER] = str(settings.DURABLERUNS_POLL_BACKOFF_SECONDS)
        return response
