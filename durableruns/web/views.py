"""Dashboard pages. Server-rendered; htmx refreshes live regions while runs are active."""

from __future__ import annotations

import functools
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.db.models import Count, QuerySet
from django.db.models.fields.json import KT
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from .. import roles
from ..engine import handback, registry
from ..engine.context import waited_seconds
from ..models import WAITING_STEP_KINDS, Approval, AuditEvent, Effect, Run, Step
from ..services.runs import is_resumable
from . import keyset, live, live_rows, saved_views
from .filters import FilterError, RunFilters, moment
from .step_window import before_param, step_window
from .timeline import duration_text, failed_attempts, pending_bar, step_rows, timeline

PAGE_SIZE = 50
COUNT_CAP = 10_000
SEARCH_CAP = 1_000
MAX_POLLED_RUNS = 100
NEW_RUNS_CAP = 99


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def runs(request: HttpRequest) -> HttpResponse:
    try:
        filters = RunFilters.from_query(request.GET)
    except FilterError as exc:
        return refused_filters(request, request.GET, str(exc))
    queryset = filters.apply(Run.objects.select_related("created_by"))
    by_cost = request.GET.get("sort") == "cost"
    sort = "cost" if by_cost else ""
    if by_cost:
        ordered = keyset.runs_by_cost_after(queryset, request.GET.get("cursor"))
        page = keyset.page(ordered, PAGE_SIZE, keyset.cost_cursor)
    else:
        ordered = keyset.runs_after(queryset, request.GET.get("cursor"))
        page = keyset.page(ordered, PAGE_SIZE, keyset.run_cursor)
    first_page = not request.GET.get("cursor")
    Run.fill_langgraph_activity(page.rows)
    context = {
        "runs": page.rows,
        "next_cursor": page.next_cursor,
        "paged": not first_page,
        "filters": filters,
        "counts": _status_counts(filters),
        "agents": _agent_choices(filters),
        "poll": _poll_query(filters, page.rows, first_page),
        "invalid": filters.invalid(),
        "no_agents": not registry.agents(),
        "sort": sort,
        **saved_views.section(request.user, saved_views.page_query(filters, sort)),
    }
    return render(request, "durableruns/runs.html", context)


def refused_filters(
    request: HttpRequest, query: QueryDict, error: str, *, acting: bool = False
) -> HttpResponse:
    """The runs page for filters it will not apply: what was typed is given back, no run
    is listed, and the bulk actions are off (they would otherwise act on every run)."""
    filters = RunFilters.typed(query)
    context = {
        "refused": error,
        "acting": acting,
        "filters": filters,
        "runs": [],
        "counts": [],
        "agents": _agent_choices(filters),
        **saved_views.section(request.user, None),  # the views, but nothing to save
    }
    return render(request, "durableruns/runs.html", context, status=400)


def _poll_query(filters: RunFilters, rows: list[Run], first_page: bool) -> str:
    """The live poll's query string, or "" for no polling. The first page polls for new
    runs and counts; a deeper page only while one of its runs is active."""
    if not first_page and not _any_active(rows):
        return ""
    params: list[tuple[str, str]] = [("run", row.id) for row in rows]
    if first_page:
        newest = rows[0].created_at.isoformat() if rows else "1970-01-01T00:00:00+00:00"
        params += [("newer", newest), *filters.items()]
    return urlencode(params)


def _status_counts(filters: RunFilters) -> list[dict[str, Any]]:
    """How many runs in each status, under every filter but the status itself."""
    runs = filters.apply(Run.objects.all(), with_status=False).order_by()
    if filters.searches():
        found, capped = _searched_counts(runs)
    else:
        found, capped = _capped_counts(runs), set()
    counts = []
    for value, label in Run.Status.choices:
        count = found.get(value, 0)
        if count > COUNT_CAP:
            shown = f"{COUNT_CAP:,}+"
        else:
            shown = f"{count:,}+" if value in capped else str(count)
        query = filters.query(status=value, cursor="")
        counts.append(
            {"status": value, "label": label, "count": count, "shown": shown, "query": query}
        )
    return counts


def _searched_counts(runs: QuerySet[Run]) -> tuple[dict[str, int], set[str]]:
    """Counts under a search (id prefix, error text, input JSON): the first SEARCH_CAP + 1
    matches of any status, grouped. One bounded scan instead of one per status, which
    such filters cannot serve from the status index; past the cap the counts are lower
    bounds, marked "+"."""
    sql, params = runs.values("status")[: SEARCH_CAP + 1].query.sql_with_params()
    with connection.cursor() as cursor:
        # `sql` is compiled by the ORM with its values as parameters.
        counting = f"SELECT status, COUNT(*) FROM ({sql}) AS capped GROUP BY status"  # noqa: S608
        cursor.execute(counting, params)
        found = dict(cursor.fetchall())
    capped = set(Run.Status.values) if sum(found.values()) > SEARCH_CAP else set()
    return found, capped


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
    """The live poll of the runs list: fresh statuses of the shown runs, swapped in by
    run id (so a row never gets another run's status), and on the first page the
    counts and how many newer runs match. The operator's ticked boxes are untouched."""
    ids = request.GET.getlist("run")[:MAX_POLLED_RUNS]
    found = list(
        Run.objects.filter(pk__in=ids).only(
            "id", "kind", "status", "steps_used", "max_steps", "started_at", "finished_at", "error"
        )
    )
    Run.fill_langgraph_activity(found)
    context: dict[str, Any] = {"runs": found, "poll": ""}
    newer = moment(request.GET.get("newer", ""))
    try:
        filters = RunFilters.from_query(request.GET)
    except FilterError:
        newer, filters = None, RunFilters()
    if newer is not None:
        context["counts"] = _status_counts(filters)
        fresh = filters.apply(Run.objects.filter(created_at__gt=newer)).order_by()
        context["new_runs"] = fresh.values("id")[: NEW_RUNS_CAP + 1].count()
        context["new_runs_cap"] = NEW_RUNS_CAP
        context["filters"] = filters
    if newer is not None or _any_active(context["runs"]):
        context["poll"] = request.GET.urlencode()
    return render(request, "durableruns/runs.html#run-statuses", context)


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def run(request: HttpRequest, run_id: str) -> HttpResponse:
    # The version is read before what the page shows, so it is never newer than it: a
    # change in between makes the next poll render again (a version read after the row
    # could already include the run's end, and every later poll would be "unchanged").
    # An unchanged poll costs the version query alone: no run row, no template.
    version = live.run_versions(run_id)
    if live.unchanged(request, version.version):
        return HttpResponse(status=204)
    shared = live_rows.shared_key(request, run_id, version.version)
    if (body := live_rows.shared_answer(shared)) is not None:
        return _delta_response(HttpResponse(body))
    record = get_object_or_404(
        Run.objects.select_related("created_by", "parent", "parent_run"), pk=run_id
    )
    context = run_context(request, record, version)
    delta = live_rows.delta(request, record, context)
    if delta is not None:
        rows = step_rows(delta.steps, _step_url(record), context["axis"]["seconds"])
        context |= {"delta": delta, "delta_rows": rows, "oob": True}
        response = render(request, "durableruns/run.html#run-delta", context)
        live_rows.share(request, shared, response.content)
        return _delta_response(response)
    template = "durableruns/run.html#run-live" if request.htmx else "durableruns/run.html"
    return render(request, template, context)


def _delta_response(response: HttpResponse) -> HttpResponse:
    response["HX-Reswap"] = "none"  # out-of-band swaps only: the region stays as it is
    return response


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def run_step(request: HttpRequest, run_id: str, position: int) -> HttpResponse:
    """One step's input, output or error and provenance: loaded when the operator opens
    it on the run page (so a 200-step page stays light), or as a page without JS."""
    step = get_object_or_404(Step.objects.select_related("run"), run_id=run_id, position=position)
    record = step.run
    _annotate(step, record)
    step.error = roles.error_for(request.user, step.error)
    context = {
        "run": record,
        "step": step,
        "failed_attempts": failed_attempts(step),
        "can_fork": record.is_terminal and request.user.has_perm(roles.OPERATE_RUNS),
    }
    template = "durableruns/run_step.html"
    return render(request, f"{template}#step-body" if request.htmx else template, context)


def _annotate(step: Step, record: Run) -> None:
    step.replays = step.replays_since(record)
    step.duration_text = duration_text(step.duration_ms / 1000)
    step.copied = bool(
        record.parent_id
        and record.fork_position is not None
        and step.position < record.fork_position
        and not step.lease_number
    )


def run_context(request: HttpRequest, record: Run, version: live.RunVersion) -> dict[str, Any]:
    """Everything the run page shows; a fixed number of queries whatever the run's size."""
    # The newest WINDOW steps; payloads are loaded per step when opened (run_step).
    window = step_window(record, before_param(request))
    steps, effects = window.steps, window.effects
    for step in steps:
        _annotate(step, record)
    previous = window.previous
    if previous is not None:
        _annotate(previous, record)
    axis = timeline(
        record,
        steps,
        pending_until=record.wake_at,
        previous_end=previous.finished_at if previous and not previous.copied else None,
    )
    can_operate = request.user.has_perm(roles.OPERATE_RUNS)
    native = record.kind == Run.Kind.NATIVE
    Run.fill_langgraph_activity([record])
    waiting_for = handback.waiting_reason(record)
    # The window's effects include every one still in doubt (step_window).
    states = {effect.state for effect in effects}
    resumable = is_resumable(record.status, states, redacted=record.redacted_at is not None)
    last = window.last_position
    context = {
        "run": record,
        # A terminal run's page stops polling, so it needs no version.
        "live_version": "" if record.is_terminal else version.version,
        "native": native,
        "langgraph": None if native else _langgraph_thread(record),
        "steps": steps,
        "window": window,
        # Called by the template only if it shows them: a changed poll sends a few.
        "step_rows": functools.partial(step_rows, steps, _step_url(record), axis["seconds"]),
        "effects": effects,
        # Effects of the rows shown, and the others (of steps under way): a changed poll
        # appends to the first and replaces the second (web/live_rows.py).
        "settled_effects": [e for e in effects if last is not None and e.position <= last],
        "tail_effects": [e for e in effects if last is None or e.position > last],
        "recorded_positions": {step.position for step in steps},
        "budget": _budget(record, steps),
        "spend": _spend(record),
        "axis": axis,
        "pending": _pending(record, effects, axis, waiting_for),
        "audit": list(AuditEvent.objects.for_run(record)),
        **_children(record),
        "can_operate": can_operate,
        "can_cancel": can_operate and not record.is_terminal,
        "can_resume": can_operate and resumable and (native or waiting_for),
    }
    context["live_frame"] = live_rows.page_frame(version.frame, context)
    context["live_rows"] = (
        "" if record.is_terminal else live_rows.rows_header(window, context["live_frame"])
    )
    return context


# Child runs listed on a parent's page; the runs list (?parent=) has them all.
CHILDREN_SHOWN = 50


def _children(record: Run) -> dict[str, Any]:
    """The run's child runs (run.child), in step order, and how many there are."""
    kids = Run.objects.filter(parent_run_id=record.pk).order_by()
    shown = list(
        kids.order_by("parent_position", "id").only(
            "id", "agent", "agent_version", "status", "kind", "parent_position",
            "steps_used", "max_steps", "finished_at", "error", "parent_run_id",
        )[: CHILDREN_SHOWN + 1]
    )  # fmt: skip
    count = len(shown) if len(shown) <= CHILDREN_SHOWN else kids.count()
    return {"children": shown[:CHILDREN_SHOWN], "children_count": count}


def _spend(record: Run) -> dict[str, Any]:
    """The run's model calls, and what replaying them (a later executor pass replays
    every recorded step) and reusing a fork's or an import's saved: tokens and dollars
    not spent again. Reads only each model step's recorded usage, in one query, and
    none for a run that has spent no tokens."""
    spend: dict[str, Any] = {"calls": 0, "replayed": 0, "copied": 0}
    if not (record.tokens_in or record.tokens_out or record.parent_id):
        return {**spend, "saved_tokens": 0, "saved_cost": 0}
    rows = record.steps.filter(kind=Step.Kind.LLM, error__isnull=True).values_list(
        "result__usage", "lease_number"
    )
    saved_tokens, saved_cost = 0, Decimal(0)
    for usage, lease_number in rows:
        usage = usage if isinstance(usage, dict) else {}
        tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        cost = Decimal(str(usage.get("cost") or 0))
        # Replayed by each later pass; a copied step (lease 0) by every pass of this run.
        passes = record.leases_taken - lease_number if lease_number else record.leases_taken
        times = max(passes, 0) if lease_number else max(passes, 1)
        spend["calls"] += 1
        spend["replayed" if lease_number else "copied"] += 1 if times else 0
        saved_tokens += tokens * times
        saved_cost += cost * times
    return {**spend, "saved_tokens": saved_tokens, "saved_cost": saved_cost}


def _langgraph_thread(record: Run) -> dict[str, Any]:
    # Imported here: durableruns.langgraph needs the optional `langgraph` extra.
    from ..langgraph.render import thread_view

    return thread_view(record)


def _step_url(record: Run) -> str:
    """A step page's URL with "{position}" in place of the position: one reverse()."""
    return reverse("run-step", args=[record.id, 0]).removesuffix("0/") + "{position}/"


def _pending(
    record: Run, effects: list[Effect], axis: dict[str, Any], waiting_for: str
) -> dict[str, Any]:
    """What the run waits for now: a worker that can load it, a step's next attempt, or
    escalated effects."""
    retry = None
    # Only while it waits for the next attempt: once a worker takes the lease the
    # wake-up time is cleared and the step shows as executing.
    if record.retry_position is not None and not record.is_terminal and record.wake_at:
        effect = next((e for e in effects if e.position == record.retry_position), None)
        retry = {
            "position": record.retry_position,
            "tool": effect.tool if effect else "",
            "failed_attempts": record.retry_attempts,
            "next_attempt": record.retry_attempts + 1,
            "error": (record.last_error or {}).get("message", ""),
            "next_at": record.wake_at,
            "bar": pending_bar(record, axis),
        }
    unknown = [effect for effect in effects if effect.state == Effect.State.UNKNOWN]
    handed_back = {"reason": waiting_for, "next_at": record.wake_at} if waiting_for else None
    return {
        "handback": handed_back,
        "retry": retry,
        "escalations": unknown,
        "any": bool(handed_back or retry or unknown),
    }


def _budget(record: Run, steps: list[Step]) -> dict[str, Any]:
    """Steps and time used. Time spent waiting for a person, for child runs or in a
    durable sleep does not count (the engine excludes those waits from the time budget,
    so the page does too)."""
    used = max(record.steps_used, len(steps))
    elapsed = waiting = 0.0
    if record.started_at:
        # An interrupted LangGraph thread has a finished_at but has not ended: an
        # approval asked after it would otherwise have waited a negative time.
        end = record.ended_at or timezone.now()
        elapsed = (end - record.started_at).total_seconds()
        waiting = _own_waits(record)
        if record.status == Run.Status.AWAITING_APPROVAL:
            asked = (
                Approval.objects.filter(run=record, state=Approval.State.PENDING)
                .order_by("created_at")
                .values_list("created_at", flat=True)
                .first()
            )
            waiting += max((end - asked).total_seconds(), 0.0) if asked else 0.0
        if record.status == Run.Status.AWAITING_CHILD:
            waiting += _waiting_for_children(record, end)
        waiting += record.escalated_seconds
        if record.escalated_at:  # escalated now, or ended while escalated
            waiting += max((end - record.escalated_at).total_seconds(), 0.0)
    # Waits for a worker that has the agent (hand-backs) are not the run's time either.
    counted = max(elapsed - waiting - record.handed_back_seconds, 0.0)
    limit = record.max_duration_seconds or 1
    return {
        "steps": used,
        "max_steps": record.max_steps,
        "steps_pct": min(100, round(100 * used / max(record.max_steps, 1))),
        "seconds": counted,
        "waiting_text": duration_text(waiting) if waiting else "",
        "handed_back_text": (
            duration_text(record.handed_back_seconds) if record.handed_back_seconds else ""
        ),
        "max_seconds": record.max_duration_seconds,
        "seconds_pct": min(100, round(100 * counted / limit)),
    }


def _waiting_for_children(record: Run, end: Any) -> float:
    """Seconds since the first child run the parent still waits for was started."""
    unfinished = Run.objects.filter(parent_run_id=record.pk).exclude(status__in=Run.TERMINAL)
    since = unfinished.order_by("created_at").values_list("created_at", flat=True).first()
    return (end - since).total_seconds() if since else 0.0


def _own_waits(record: Run) -> float:
    """Seconds the run's own approval, child-run and sleep steps waited, as the engine
    counts them for max_duration (steps copied from a fork's parent waited in the
    parent's time). One query over the few waiting steps, whatever the window shows,
    reading a sleep's wake-up time and no result (a child step's is its child's whole
    result)."""
    own = record.steps.filter(kind__in=WAITING_STEP_KINDS)
    if record.parent_id and record.fork_position is not None:
        own = own.exclude(position__lt=record.fork_position, lease_number=0)
    rows = own.annotate(until=KT("result__until")).values_list(
        "kind", "started_at", "finished_at", "until"
    )
    return waited_seconds(
        SimpleNamespace(
            kind=kind,
            started_at=started,
            finished_at=finished,
            result={"until": until} if until else None,
        )
        for kind, started, finished, until in rows
    )


@require_GET
def moved_to_manage(request: HttpRequest, rest: str) -> HttpResponse:
    """The admin pages moved from /admin/ to /manage/; GETs follow (POSTs must not)."""
    query = request.META.get("QUERY_STRING", "")
    return HttpResponsePermanentRedirect(f"/manage/{rest}" + (f"?{query}" if query else ""))


@login_not_required
@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponsePermanentRedirect(static("durableruns/favicon.svg"))


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Where logging in lands: reviewers on their inbox, everyone else on the runs."""
    user = request.user
    if user.has_perm(roles.DECIDE_APPROVALS) and not user.has_perm(roles.OPERATE_RUNS):
        return redirect("approvals")
    return redirect("runs")
