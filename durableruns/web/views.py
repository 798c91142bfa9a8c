"""Dashboard pages. Server-rendered; htmx refreshes live regions while runs are active."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import BooleanField, Count, ExpressionWrapper, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from .. import roles
from ..engine import registry
from ..models import AuditEvent, Run, Step
from ..services.runs import RESUMABLE
from . import keyset
from .filters import RunFilters
from .waterfall import waterfall

PAGE_SIZE = 50
COUNT_CAP = 10_000
MAX_POLLED_RUNS = 100


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def runs(request: HttpRequest) -> HttpResponse:
    filters = RunFilters.from_query(request.GET)
    queryset = filters.apply(Run.objects.select_related("created_by"))
    page = keyset.page(
        keyset.runs_after(queryset, request.GET.get("cursor")), PAGE_SIZE, keyset.run_cursor
    )
    context = {
        "runs": page.rows,
        "next_cursor": page.next_cursor,
        "paged": bool(request.GET.get("cursor")),
        "filters": filters,
        "counts": _status_counts(filters),
        "agents": _agent_choices(filters),
        "live": _any_active(page.rows),
        "invalid": filters.invalid(),
    }
    return render(request, "durableruns/runs.html", context)


def _status_counts(filters: RunFilters) -> list[dict[str, Any]]:
    """How many runs in each status, under every filter but the status itself."""
    found = _capped_counts(filters.apply(Run.objects.all(), with_status=False).order_by())
    return [
        {
            "status": value,
            "label": label,
            "count": found.get(value, 0),
            "shown": f"{COUNT_CAP:,}+" if found.get(value, 0) > COUNT_CAP else found.get(value, 0),
            "query": filters.query(status=value, cursor=""),
        }
        for value, label in Run.Status.choices
    ]


def _capped_counts(runs: QuerySet[Run]) -> dict[str, int]:
    """Per-status counts, exact up to COUNT_CAP. An exact count of a million runs costs
    about 200 ms a page; counting at most COUNT_CAP + 1 index entries per status keeps
    the page fast at any size, in one query."""
    if not connection.features.supports_slicing_ordering_in_compound:  # SQLite (the demo)
        rows = runs.values("status").annotate(n=Count("id"))
        return {row["status"]: row["n"] for row in rows}
    parts = [
        runs.filter(status=status).values("status")[: COUNT_CAP + 1] for status in Run.Status.values
    ]
    sql, params = parts[0].union(*parts[1:], all=True).query.sql_with_params()
    with connection.cursor() as cursor:
        # `sql` is compiled by the ORM with its values as parameters.
        counting = f"SELECT status, COUNT(*) FROM ({sql}) AS capped GROUP BY status"  # noqa: S608
        cursor.execute(counting, params)
        return dict(cursor.fetchall())


def _agent_choices(filters: RunFilters) -> dict[str, Any]:
    """Agents and versions for the filter menus: the registered ones, plus the chosen ones."""
    agents = {a.name for a in registry.agents()} | ({filters.agent} if filters.agent else set())
    versions = {a.version for a in registry.agents()} | (
        {filters.version} if filters.version else set()
    )
    return {"agents": sorted(agents), "versions": sorted(versions)}


def _any_active(rows: list[Run]) -> bool:
    return any(not run.is_terminal for run in rows)


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def run_statuses(request: HttpRequest) -> HttpResponse:
    """The live poll of the runs list: fresh statuses of the shown runs, swapped in by id,
    so the operator's ticked checkboxes survive. Polling stops once none is active."""
    ids = request.GET.getlist("run")[:MAX_POLLED_RUNS]
    found = Run.objects.filter(pk__in=ids).only("id", "status", "steps_used", "max_steps")
    by_id = {row.id: row for row in found}
    # Same order as the page, whose cells are numbered by row.
    rows = [by_id[run_id] for run_id in ids if run_id in by_id]
    context = {"runs": rows, "live": _any_active(rows)}
    return render(request, "durableruns/runs.html#run-statuses", context)


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def run(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run.objects.select_related("created_by", "parent"), pk=run_id)
    template = "durableruns/run.html#run-live" if request.htmx else "durableruns/run.html"
    return render(request, template, run_context(request, record))


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def run_step(request: HttpRequest, run_id: str, position: int) -> HttpResponse:
    """One step's input, output or error and provenance: loaded when the operator opens
    it on the run page (so a 200-step page stays light), or as a page without JS."""
    step = get_object_or_404(Step.objects.select_related("run"), run_id=run_id, position=position)
    record = step.run
    _annotate(step, record)
    context = {
        "run": record,
        "step": step,
        "can_fork": record.is_terminal and request.user.has_perm(roles.OPERATE_RUNS),
    }
    template = "durableruns/run_step.html"
    return render(request, f"{template}#step-body" if request.htmx else template, context)


def _annotate(step: Step, record: Run) -> None:
    step.replays = step.replays_since(record)
    step.duration_text = f"{step.duration_ms:.1f} ms"
    step.copied = bool(
        record.parent_id
        and record.fork_position is not None
        and step.position < record.fork_position
        and not step.lease_number
    )


def run_context(request: HttpRequest, record: Run) -> dict[str, Any]:
    """Everything the run page shows; a fixed number of queries whatever the run's size."""
    # Payloads are loaded per step when opened (run_step), not for every step here.
    steps = list(
        record.steps.order_by("position")
        .defer("input", "result", "error")
        .annotate(failed=ExpressionWrapper(Q(error__isnull=False), output_field=BooleanField()))
    )
    effects = list(record.effects.order_by("position"))
    for step in steps:
        _annotate(step, record)
    can_operate = request.user.has_perm(roles.OPERATE_RUNS)
    native = record.kind == Run.Kind.NATIVE
    return {
        "run": record,
        "native": native,
        "langgraph": None if native else _langgraph_thread(record),
        "steps": steps,
        "effects": effects,
        "budget": _budget(record, len(steps)),
        "waterfall": waterfall(steps),
        "audit": list(AuditEvent.objects.for_run(record)),
        "can_operate": can_operate,
        "can_cancel": can_operate and not record.is_terminal,
        "can_resume": can_operate and native and record.status in RESUMABLE,
    }


def _langgraph_thread(record: Run) -> dict[str, Any]:
    # Imported here: durableruns.langgraph needs the optional `langgraph` extra.
    from ..langgraph.render import thread_view

    return thread_view(record)


def _budget(record: Run, steps: int) -> dict[str, Any]:
    used = max(record.steps_used, steps)
    if record.started_at:
        elapsed = ((record.finished_at or timezone.now()) - record.started_at).total_seconds()
    else:
        elapsed = 0.0
    limit = record.max_duration_seconds or 1
    return {
        "steps": used,
        "max_steps": record.max_steps,
        "steps_pct": min(100, round(100 * used / max(record.max_steps, 1))),
        "seconds": elapsed,
        "max_seconds": record.max_duration_seconds,
        "seconds_pct": min(100, round(100 * elapsed / limit)),
    }
