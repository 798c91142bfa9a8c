"""Dashboard pages. Server-rendered; htmx refreshes live regions while runs are active."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from ..models import Run
from ..roles import VIEW_RUNS, permission_required

PAGE_SIZE = 50


@require_GET
@permission_required(VIEW_RUNS)
def runs(request: HttpRequest) -> HttpResponse:
    queryset = Run.objects.order_by("-created_at", "-id")
    status = request.GET.get("status", "")
    if status in Run.Status.values:
        queryset = queryset.filter(status=status)
    page = list(queryset[:PAGE_SIZE])
    live = any(not run.is_terminal for run in page)
    context = {"runs": page, "status": status, "statuses": Run.Status.choices, "live": live}
    template = "durableruns/runs.html#run-table" if request.htmx else "durableruns/runs.html"
    return render(request, template, context)


@require_GET
@permission_required(VIEW_RUNS)
def run(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run, pk=run_id)
    context = {
        "run": record,
        "steps": list(record.steps.order_by("position")),
        "effects": list(record.effects.order_by("position")),
    }
    template = "durableruns/run.html#run-live" if request.htmx else "durableruns/run.html"
    return render(request, template, context)
