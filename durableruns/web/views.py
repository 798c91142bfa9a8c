"""Dashboard pages. Server-rendered; htmx refreshes live regions while runs are active."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from .. import roles
from ..models import Run

PAGE_SIZE = 50


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
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
@roles.permission_required(roles.VIEW_RUNS)
def run(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run, pk=run_id)
    context = {
        "run": record,
        "steps": list(record.steps.order_by("position")),
        "effects": list(record.effects.order_by("position")),
    }
    template = "durableruns/run.html#run-live" if request.htmx else "durableruns/run.html"
    return render(request, template, context)


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"database": "down"}, status=503)
    return JsonResponse({"database": "ok"})
