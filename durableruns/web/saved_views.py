"""Saved views of the runs page (issue 24): a person keeps the filters they use under a
name, and opens them again as a link to the runs page with their query string.

A view is its owner's alone: listed to nobody else, deleted by nobody else (another's
id is a 404, as if it did not exist). What is stored is the page's query string made
normal: only the filters the runs page knows (and its sort), read and checked by the
same `RunFilters` the page uses, so a view never holds what the page would refuse or
ignore. Saving under a name already used replaces that view's filters (the way to
change a view), and says so. Refused input (no name, a long one, a control character,
filters the page refuses, too many views) is a 400 with the reason and writes nothing.

Not audited (tests/security/test_audit_coverage.py, EXEMPT): a view changes no run and
nobody else's data, and is seen by nobody else; like signing out, it is a person's own.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from django.contrib import messages
from django.core.exceptions import TooManyFieldsSent
from django.db import transaction
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from .. import roles
from ..models import SavedView
from .filters import FilterError, RunFilters

MAX_NAME = 80  # SavedView.name
MAX_QUERY = 4096  # the query string as sent; the filters' own limits apply after
MAX_VIEWS = 50  # per person: the runs page lists them all
SORTS = {"cost"}  # the runs page's sorts besides the default (newest first)
SECTION = "durableruns/runs.html#saved-views"


class Refused(ValueError):
    """A view that is not saved, with the reason a person reads."""


def check_name(text: str) -> str:
    name = text.strip()
    if not name:
        raise Refused("a saved view needs a name")
    if len(name) > MAX_NAME:
        raise Refused(f"a name has at most {MAX_NAME} characters")
    # A form's undecodable bytes (a lone surrogate's among them) arrive as U+FFFD;
    # NUL never gets here (validation.py), the other control characters would be
    # invisible in the list.
    if "\ufffd" in name or any(unicodedata.category(char) == "Cs" for char in name):
        raise Refused("the name is not valid Unicode (a lone surrogate or undecodable bytes)")
    if any(unicodedata.category(char) == "Cc" for char in name):
        raise Refused("the name contains a control character")
    return name


def normalise(text: str) -> str:
    """The runs page's query string `text` as stored: its known filters only, in the
    page's order, with empty and unknown parameters (a cursor, anything else) dropped.
    Raises Refused for filters the page would refuse, or ignore (an unreadable date)."""
    if len(text) > MAX_QUERY:
        raise Refused(f"the filters are longer than {MAX_QUERY} characters")
    try:
        query = QueryDict(text)
        filters = RunFilters.from_query(query)
        filters.check_for_action()  # an unreadable date, which the page would ignore
    except TooManyFieldsSent:
        raise Refused("the filters have too many parameters") from None
    except FilterError as exc:
        raise Refused(str(exc)) from None
    return filters.query(sort=_sort(query.get("sort", "")))


def page_query(filters: RunFilters, sort: str) -> str | None:
    """The query string a view of the page showing `filters` and `sort` saves, or None
    when a filter is ignored as unreadable (such filters are not saved)."""
    return None if filters.invalid() else filters.query(sort=_sort(sort))


def _sort(value: str) -> str:
    return value if value in SORTS else ""


def section(user: Any, query: str | None, **extra: Any) -> dict[str, Any]:
    """The #saved-views section's context: `user`'s views (one query) and the query the
    save form carries (None: the page's filters are refused, so there is no form)."""
    views = SavedView.objects.filter(owner=user).order_by("name")
    return {
        "saved_views": list(views.values("pk", "name", "query")[:MAX_VIEWS]),
        "view_query": query,
        **extra,
    }


def _runs_url(query: str) -> str:
    return f"{reverse('runs')}?{query}" if query else reverse("runs")


def _lenient(text: str) -> str:
    """The page to go back to: the filters sent, or none when they are refused."""
    try:
        return normalise(text)
    except Refused:
        return ""


def _store(user: Any, name: str, query: str) -> bool:
    """Save `query` as `user`'s view `name`; True when it replaced one."""
    with transaction.atomic():
        mine = SavedView.objects.filter(owner=user)
        replaced = mine.filter(name=name).exists()
        if not replaced and mine.count() >= MAX_VIEWS:
            raise Refused(f"you have {MAX_VIEWS} saved views: delete one first")
        # One statement: a concurrent save of the same name replaces, never fails.
        SavedView.objects.bulk_create(
            [SavedView(owner=user, name=name, query=query)],
            update_conflicts=True,
            unique_fields=["owner", "name"],
            update_fields=["query"],
        )
    return replaced


def _answer(request: HttpRequest, query: str, notice: str) -> HttpResponse:
    """htmx: the section again, in place; without JavaScript: back to the runs page
    with the same filters, the notice on top."""
    if request.htmx:
        return render(request, SECTION, section(request.user, query, saved_notice=notice))
    messages.success(request, notice)
    return redirect(_runs_url(query))


@require_POST
@roles.permission_required(roles.VIEW_RUNS)
def save(request: HttpRequest) -> HttpResponse:
    sent = request.POST.get("query", "")
    try:
        name = check_name(request.POST.get("name", ""))
        query = normalise(sent)
        replaced = _store(request.user, name, query)
    except Refused as exc:
        if request.htmx:
            context = section(request.user, _lenient(sent), saved_error=str(exc))
            return render(request, SECTION, context, status=400)
        context = {"status": 400, "title": "Not saved", "detail": f"Not saved: {exc}."}
        return render(request, "errors/error.html", context, status=400)
    verb = "Replaced the saved view" if replaced else "Saved the view"
    return _answer(request, query, f"{verb} “{name}”.")


@require_POST
@roles.permission_required(roles.VIEW_RUNS)
def delete(request: HttpRequest, pk: int) -> HttpResponse:
    view = get_object_or_404(SavedView, pk=pk, owner=request.user)
    view.delete()
    return _answer(request, _lenient(request.POST.get("query", "")), f"Deleted “{view.name}”.")
