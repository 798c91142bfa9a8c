"""Operator actions from the dashboard: cancel, resume (one run or many).

Every state change is a POST that works without JavaScript and redirects; htmx
posts get the run page's live region back instead. The engine operations are
conditional updates, so a repeated click is harmless, and they audit themselves.
"""

from __future__ import annotations

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import roles
from ..engine.replay import ForkError, fork_preview
from ..models import Run
from ..services import runs as operations
from .filters import RunFilters
from .views import run_context

# Each run is its own audited transaction; a larger batch is repeated by the operator.
BULK_LIMIT = 500
BULK_ACTIONS = {
    "cancel": ("Cancel", operations.cancel),
    "resume": ("Resume", operations.resume),
}


def _eligible(action: str, queryset: QuerySet[Run]) -> QuerySet[Run]:
    if action == "cancel":
        return queryset.exclude(status__in=Run.TERMINAL)
    return queryset.filter(status__in=operations.RESUMABLE, kind=Run.Kind.NATIVE)


def _after_action(request: HttpRequest, record: Run) -> HttpResponse:
    if request.htmx:
        record = Run.objects.select_related("created_by", "parent").get(pk=record.pk)
        return render(request, "durableruns/run.html#run-live", run_context(request, record))
    return redirect(record)


@require_POST
@roles.permission_required(roles.OPERATE_RUNS)
def cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run, pk=run_id)
    if operations.cancel(record, user=request.user):
        messages.success(request, f"Cancelled run {record.id}.")
    else:
        messages.info(request, f"Run {record.id} had already finished; nothing to cancel.")
    return _after_action(request, record)


@require_POST
@roles.permission_required(roles.OPERATE_RUNS)
def resume(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run, pk=run_id)
    if operations.resume(record, user=request.user):
        messages.success(request, f"Resumed run {record.id} from its last checkpoint.")
    else:
        messages.info(
            request,
            f"Run {record.id} is {record.status}; only failed, cancelled "
            "or waiting runs can be resumed.",
        )
    return _after_action(request, record)


def _bulk_target(query: QueryDict) -> tuple[str, str, RunFilters, QuerySet[Run]] | None:
    action, _, scope = query.get("do", "").partition(":")
    if action not in BULK_ACTIONS or scope not in ("selected", "filtered"):
        return None
    filters = RunFilters.from_query(query)
    if scope == "selected":
        queryset = Run.objects.filter(pk__in=query.getlist("run")[:BULK_LIMIT])
    else:
        queryset = filters.apply(Run.objects.all())
    return action, scope, filters, queryset


@require_http_methods(["GET", "POST"])
@roles.permission_required(roles.OPERATE_RUNS)
def bulk(request: HttpRequest) -> HttpResponse:
    """GET: the confirmation page saying how many runs; POST: do it, then redirect."""
    query = request.POST if request.method == "POST" else request.GET
    target = _bulk_target(query)
    if target is None:
        messages.error(request, "Choose an action: cancel or resume, selected or all matching.")
        return redirect("runs")
    action, scope, filters, queryset = target
    if request.method == "POST":
        return _apply_bulk(request, action, filters, queryset)
    eligible = _eligible(action, queryset)
    context = {
        "action": action,
        "verb": BULK_ACTIONS[action][0],
        "scope": scope,
        "filters": filters,
        "matching": queryset.count(),
        "eligible": eligible.count(),
        "sample": list(eligible.order_by("created_at", "id")[:20]),
        "selected": query.getlist("run")[:BULK_LIMIT],
        "limit": BULK_LIMIT,
    }
    return render(request, "durableruns/runs_bulk.html", context)


def _apply_bulk(
    request: HttpRequest, action: str, filters: RunFilters, queryset: QuerySet[Run]
) -> HttpResponse:
    verb, operation = BULK_ACTIONS[action]
    targets = list(_eligible(action, queryset).order_by("created_at", "id")[:BULK_LIMIT])
    done = sum(1 for record in targets if operation(record, user=request.user))
    text = f"{verb}: {done} run{pluralize(done)} changed."
    if len(targets) == BULK_LIMIT:
        text += f" At most {BULK_LIMIT} at a time: repeat for the rest."
    messages.success(request, text)
    return redirect(f"{reverse('runs')}?{filters.query()}")


@require_GET
@roles.permission_required(roles.OPERATE_RUNS)
def replay(request: HttpRequest, run_id: str) -> HttpResponse:
    """Dry replay: agent code against the recorded history, every tool and model call
    forbidden. Reads only, so a GET; operators only, since it runs agent code."""
    record = get_object_or_404(Run, pk=run_id)
    report = operations.dry_replay(record)
    return render(request, "durableruns/run_replay.html", {"run": record, "report": report})


@require_http_methods(["GET", "POST"])
@roles.permission_required(roles.OPERATE_RUNS)
def fork(request: HttpRequest, run_id: str) -> HttpResponse:
    """GET: which effects would execute again, with new keys; POST: make the fork."""
    record = get_object_or_404(Run, pk=run_id)
    query = request.POST if request.method == "POST" else request.GET
    position = _position(query.get("position", ""))
    try:
        if request.method == "POST":
            child = operations.fork(
                record, position, user=request.user, sandbox=query.get("sandbox") == "on"
            )
            messages.success(request, f"Forked run {record.id} from step {position}.")
            return redirect(child)
        recorded = record.steps.count()
        if not 0 <= position <= recorded:
            raise ForkError(f"fork position must be between 0 and {recorded} (the recorded steps)")
        again = fork_preview(record, position)
        steps = list(record.steps.filter(position__lt=position).order_by("position"))
    except ForkError as exc:
        return render(
            request,
            "durableruns/run_fork.html",
            {"run": record, "error": str(exc), "position": position},
            status=400,
        )
    context = {"run": record, "position": position, "again": again, "reused": steps}
    return render(request, "durableruns/run_fork.html", context)


def _position(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1
