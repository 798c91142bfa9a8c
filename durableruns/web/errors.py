"""The site's error pages (400, 403, 404, 429, 500), in its layout with navigation;
under /api/ the same errors are JSON problem details (durableruns.validation.problem)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.template import loader

from ..validation import problem

log = logging.getLogger(__name__)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    detail = str(exception) if exception.args else "The request was malformed."
    return problem(request, 400, "Bad request", detail)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return problem(request, 403, "Forbidden", "Your role does not allow this.")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return problem(request, 404, "Not found", "There is no such page, run, step or effect.")


def server_error(request: HttpRequest) -> HttpResponse:
    """Rendered without a request context: whatever broke may break that too."""
    if request.path_info.startswith("/api/"):
        return problem(request, 500, "Server error", "Something went wrong; it was logged.")
    try:
        return HttpResponseServerError(loader.get_template("500.html").render())
    except Exception:  # the page must never fail worse than the error it reports
        log.exception("the 500 page itself failed")
        return HttpResponseServerError("Server error", content_type="text/plain")
