"""Operator actions from the dashboard: cancel, resume (one run or many).

Every state change is a POST that works without JavaScript and redirects; htmx
posts get the run page's live region back instead. The engine operations are
conditional updates, so a repeated click is harmless, and they audit themselves.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import roles, validation
from ..engine.replay import (
    KEEP_OUTPUT,
    ForkError,
    fork_dry_run,
    fork_input,
    fork_output,
    fork_preview,
)
from ..models import Run
from ..services import runs as operations
from . import live
from .filters import FilterError, RunFilters
from .views import refused_filters, run_context

# Each run is its own audited transaction; a larger batch goes on in further requests
# (the confirmation page chains them with htmx and shows the progress).
BULK_LIMIT = 500
MAX_INPUT_TEXT = 100_000


def _fork_from_failure(record: Run, *, user: Any, reason: str = "") -> bool:
    """Fork a finished run from its failed step (or after its last step), so the
    failure is tried again with the code deployed now."""
    failed = (
        record.steps.filter(error__isnull=False).order_by("position").values_list("position")
    ).first()
    position = failed[0] if failed else record.steps.count()
    operations.fork(record, position, user=user, reason=reason)
    return True


BULK_ACTIONS = {
    "cancel": ("Cancel", operations.cancel),
    "resume": ("Resume", operations.resume),
    "fork": ("Fork", _fork_from_failure),
}


def _eligible(action: str, queryset: QuerySet[Run]) -> QuerySet[Run]:
    if action == "cancel":
        return queryset.exclude(status__in=Run.TERMINAL)
    if action == "fork":
        # A run forked already is left out, so a batch that goes on cannot fork it twice.
        forked = Run.objects.filter(parent=OuterRef("pk"))
        return queryset.filter(status__in=(Run.Status.FAILED, Run.Status.CANCELLED)).exclude(
            Exists(forked)
        )
    return queryset.filter(operations.resumable(), kind=Run.Kind.NATIVE)


def _after_action(request: HttpRequest, record: Run) -> HttpResponse:
    if request.htmx:
        version = live.run_versions(record.pk)  # before the row, as the run page reads it
        record = Run.objects.select_related("created_by", "parent").get(pk=record.pk)
        context = run_context(request, record, version)
        return render(request, "durableruns/run.html#run-live", context)
    return redirect(record)


@require_http_methods(["GET", "POST"])
@roles.permission_required(roles.OPERATE_RUNS)
def cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    """GET: the confirmation, asking why (as bulk cancel and the API do); POST: cancel."""
    record = get_object_or_404(Run, pk=run_id)
    context = {"run": record, "reason": request.POST.get("reason", "").strip()}
    context["children"] = record.children.exclude(status__in=Run.TERMINAL).count()
    if request.method == "GET":
        return render(request, "durableruns/run_cancel.html", context)
    try:
        reason = operations.person_reason(request.POST.get("reason"))
    except operations.ReasonRequired as exc:
        context["reason_error"] = f"Not cancelled: {exc}."
        return render(request, "durableruns/run_cancel.html", context, status=400)
    if operations.cancel(record, user=request.user, reason=reason):
        messages.success(request, f"Cancelled run {record.id}.")
    else:
        messages.info(request, f"Run {record.id} had already finished; nothing to cancel.")
    return redirect(record)


@require_POST
@roles.permission_required(roles.OPERATE_RUNS)
def resume(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run, pk=run_id)
    if operations.resume(record, user=request.user):
        messages.success(request, f"Resumed run {record.id} from its last checkpoint.")
    else:
        record.refresh_from_db()
        messages.info(request, f"Not resumed: {operations.not_resumed(record)}.")
    return _after_action(request, record)


def _bulk_target(query: QueryDict) -> tuple[str, str, RunFilters, QuerySet[Run]] | None:
    action, _, scope = query.get("do", "").partition(":")
    if action not in BULK_ACTIONS or scope not in ("selected", "filtered"):
        return None
    filters = RunFilters.from_query(query)
    filters.check_for_action()
    if scope == "selected":
        queryset = Run.objects.filter(pk__in=query.getlist("run")[:BULK_LIMIT])
    else:
        queryset = filters.apply(Run.objects.all())
    return action, scope, filters, queryset


@require_http_methods(["GET", "POST"])
@roles.permission_required(roles.OPERATE_RUNS)
def bulk(request: HttpRequest) -> HttpResponse:
    """GET: the confirmation page saying how many runs, and which filter; POST: do it
    (with a reason, audited on every run), then redirect, or with htmx go on batch
    by batch showing the progress."""
    query = request.POST if request.method == "POST" else request.GET
    try:
        target = _bulk_target(query)
    except FilterError as exc:
        return refused_filters(request, query, str(exc), acting=True)
    if target is None:
        messages.error(request, "Choose an action: cancel, resume or fork, selected or matching.")
        return redirect("runs")
    if query.get("do", "").endswith(":selected") and not query.getlist("run"):
        messages.error(request, "Nothing selected: tick the runs to act on first.")
        return redirect(f"{reverse('runs')}?{target[2].query()}")
    action, scope, filters, queryset = target
    context = _confirmation(action, scope, filters, queryset, query)
    if request.method == "GET":
        return render(request, "durableruns/runs_bulk.html", context)
    try:
        reason = operations.person_reason(query.get("reason"))
    except operations.ReasonRequired as exc:
        context["reason_error"] = f"{str(exc).capitalize()}."
        return render(request, "durableruns/runs_bulk.html", context, status=400)
    return _apply_bulk(request, action, filters, queryset, reason)


def _confirmation(
    action: str, scope: str, filters: RunFilters, queryset: QuerySet[Run], query: QueryDict
) -> dict[str, Any]:
    eligible = _eligible(action, queryset)
    return {
        "action": action,
        "verb": BULK_ACTIONS[action][0],
        "scope": scope,
        "filters": filters,
        "matching": queryset.count(),
        "eligible": eligible.count(),
        "sample": list(eligible.order_by("created_at", "id")[:20]),
        "selected": query.getlist("run")[:BULK_LIMIT],
        "limit": BULK_LIMIT,
        "reason": query.get("reason", "").strip()[: operations.REASON_MAX],
    }


def _apply_bulk(
    request: HttpRequest, action: str, filters: RunFilters, queryset: QuerySet[Run], reason: str
) -> HttpResponse:
    verb, operation = BULK_ACTIONS[action]
    # Read before anything changes: a bad count is a 400 with no run touched.
    before = validation.integer(request.POST.get("done_so_far") or "0", "done_so_far")
    targets = list(_eligible(action, queryset).order_by("created_at", "id")[:BULK_LIMIT])
    done = sum(1 for record in targets if operation(record, user=request.user, reason=reason))
    remaining = _eligible(action, queryset).count() if len(targets) == BULK_LIMIT else 0
    if request.htmx:
        so_far = done + before
        context = {"verb": verb, "done": so_far, "remaining": remaining, "filters": filters}
        return render(request, "durableruns/runs_bulk.html#bulk-progress", context)
    text = f"{verb}: {done} run{pluralize(done)} changed."
    if remaining:
        text += f" {remaining} more match: repeat to go on ({BULK_LIMIT} at a time)."
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
    """GET (or POST with `check`): which effects would execute again, with new keys,
    and the input the fork would get (edited or not); POST: make the fork."""
    record = get_object_or_404(Run, pk=run_id)
    query = request.POST if request.method == "POST" else request.GET
    position = _position(query.get("position", ""))
    input_text = query.get("input", "")
    output_text = query.get("output", "")
    context: dict[str, Any] = {
        "run": record,
        "position": position,
        "input_text": input_text,
        "output_text": output_text,
        "can_approve": request.user.has_perm(roles.DECIDE_APPROVALS),
        # A sandbox first: a fork calls no write tool unless the operator unticks it.
        "sandbox": request.method == "GET" or query.get("sandbox") == "on",
        "reason": query.get("reason", "").strip()[: operations.REASON_MAX],
    }
    try:
        edited = _edited_input(record, input_text)
        output = _edited_output(record, position, output_text)
        context["edited_output"] = output is not KEEP_OUTPUT
        if request.method == "POST" and "check" not in query:
            said = _forked(record, position, edited, output)
            child = operations.fork(
                record,
                position,
                user=request.user,
                sandbox=context["sandbox"],
                reuse_approvals=query.get("reuse_approvals") == "on",
                input=edited,
                output=output,
                reason=_fork_reason(query),
            )
            messages.success(request, said)
            return redirect(child)
        recorded = record.steps.count()
        if not 0 <= position <= recorded:
            raise ForkError(f"fork position must be between 0 and {recorded} (the recorded steps)")
        context["again"] = fork_preview(record, position)
        context["reused"] = list(record.steps.filter(position__lt=position).order_by("position"))
        if edited is not None and position > 0:
            context["dry_run"] = fork_dry_run(record, position, edited)
    except ForkError as exc:
        context["error"] = str(exc)
        return render(request, "durableruns/run_fork.html", _fork_form(context, record), status=400)
    return render(request, "durableruns/run_fork.html", _fork_form(context, record, edited))


def _fork_reason(query: QueryDict) -> str:
    try:
        return operations.person_reason(query.get("reason"))
    except operations.ReasonRequired as exc:
        raise ForkError(f"not forked: {exc}") from None


def _forked(record: Run, position: int, edited: Any, output: Any) -> str:
    """What the fork is made with, in words (said before it is made: an edited decision
    is not applied, see services.runs.fork)."""
    changed = " with edited input" if edited is not None else ""
    if output is KEEP_OUTPUT:
        return f"Forked run {record.id} from step {position}{changed}."
    plan = operations.fork_approvals(record, position, edits=True, edits_output=True)
    if plan.edited_decision is not None:
        return (
            f"Forked run {record.id} from step {position}{changed}, without the edited "
            f"output: step #{position - 1} is an approval, a fork cannot edit its decision, "
            "so a reviewer is asked again."
        )
    return f"Forked run {record.id} from step {position}{changed} with an edited output."


def _edited_input(record: Run, text: str) -> Any:
    """The operator's edited input as it would be stored, or None when unchanged."""
    if not text.strip():
        return None
    if "\x00" in text or len(text) > MAX_INPUT_TEXT:
        raise ForkError(f"the edited input must be under {MAX_INPUT_TEXT} characters, without NUL")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ForkError("the edited input is not valid JSON") from None
    # Compared as stored (redacted); the fork gets the value typed, and seals it.
    return None if fork_input(value) == record.input else value


def _edited_output(record: Run, position: int, text: str) -> Any:
    """The edited output of the last reused step as it would be stored, or KEEP_OUTPUT."""
    if not text.strip() or position < 1:
        return KEEP_OUTPUT
    if "\x00" in text or len(text) > MAX_INPUT_TEXT:
        raise ForkError(f"the edited output must be under {MAX_INPUT_TEXT} characters, without NUL")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ForkError("the edited output is not valid JSON") from None
    last = record.steps.filter(position=position - 1).values("result").first()
    if last is None or fork_output(value) == last["result"]:  # the form as shown: unedited
        return KEEP_OUTPUT
    return value


def _fork_form(context: dict[str, Any], record: Run, edited: Any = None) -> dict[str, Any]:
    """What the form shows: the edited input and output if any, else the recorded ones."""
    context["edited"] = edited
    context["shown_input"] = _pretty(record.input if edited is None else fork_input(edited))
    position = context["position"]
    last = record.steps.filter(position=position - 1).first() if position >= 1 else None
    context["last_reused"] = last
    plan = operations.fork_approvals(
        record,
        position,
        edits=edited is not None or bool(context.get("edited_output")),
        edits_output=bool(context.get("edited_output")),
    )
    context["ask_again"] = [*plan.required, *plan.reusable]
    context["can_reuse"] = bool(plan.reusable) and not plan.required
    context["edited_decision"] = plan.edited_decision
    if last is not None:
        context["shown_output"] = context["output_text"] or _pretty(last.result)
    if context.get("error"):  # give back what was typed
        context["shown_input"] = context["input_text"] or context["shown_input"]
    return context


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _position(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1
