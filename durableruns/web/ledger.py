"""The effect ledger and the escalation queue: what the agents did to the world,
and the calls whose outcome only a human can settle."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from .. import roles
from ..engine import registry
from ..engine.errors import DurableRunsError
from ..models import Effect
from ..services import escalations as escalation_service
from ..validation import InvalidInput, parse_json
from . import keyset

PAGE_SIZE = 50
ESCALATIONS_SHOWN = 100


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def effects(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    state = state if state in Effect.State.values else ""
    kind = request.GET.get("kind", "")
    kind = kind if kind in registry.TOOL_KINDS else ""
    tool = request.GET.get("tool", "").strip()[:100]
    key = request.GET.get("key", "").strip()[:255]
    queryset = Effect.objects.all()
    if state:
        queryset = queryset.filter(state=state)
    if kind:
        queryset = queryset.filter(tool_kind=kind)
    if tool:
        queryset = queryset.filter(tool=tool)
    if key:
        queryset = queryset.filter(idempotency_key=key)  # exact: "did we already refund this?"
    filters = {"state": state, "kind": kind, "tool": tool, "key": key}
    page = keyset.page(
        keyset.effects_after(queryset, request.GET.get("cursor")), PAGE_SIZE, keyset.effect_cursor
    )
    context = {
        "effects": page.rows,
        "next_cursor": page.next_cursor,
        "paged": bool(request.GET.get("cursor")),
        "filters": filters,
        "query": urlencode({k: v for k, v in filters.items() if v}),
        "states": Effect.State.choices,
        "kinds": registry.TOOL_KINDS,
        "tools": sorted({t.name for t in registry.tools()} | ({tool} if tool else set())),
    }
    return render(request, "durableruns/effects.html", context)


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def escalations(request: HttpRequest) -> HttpResponse:
    return render(request, "durableruns/escalations.html", _queue_context(request))


def _queue_context(request: HttpRequest, rejected: dict[str, Any] | None = None) -> dict[str, Any]:
    """The queue; `rejected` puts a refused answer (and what was typed) back on its effect."""
    unknown = list(
        Effect.objects.filter(state=Effect.State.UNKNOWN).order_by("started_at", "id")[
            :ESCALATIONS_SHOWN
        ]
    )
    for effect in unknown:
        effect.evidence = _evidence(effect)
        effect.form = rejected if rejected and rejected["effect"] == effect.pk else {}
    # An answer for an effect no longer in the queue (someone else settled it) is
    # refused at the top of the page instead.
    elsewhere = rejected if rejected and all(e.pk != rejected["effect"] for e in unknown) else None
    return {
        "escalations": unknown,
        "can_operate": request.user.has_perm(roles.OPERATE_RUNS),
        "rejected_elsewhere": elsewhere,
    }


NEVER_RECORDED = "the call was started but its outcome was never recorded"
RECONCILE_FAILED = "reconcile failed"
ABORTED_UNKNOWN = "the run was aborted while this call's outcome was unknown"


def _evidence(effect: Effect) -> dict[str, str]:
    """What the ledger knows about an unknown outcome, in the operator's words. The
    crash cases (before, during or after the call) leave the same ledger row, so the
    page says so instead of guessing; only the provider can tell them apart."""
    tool = registry.find_tool(effect.tool)
    has_lookup = tool is not None and tool.reconcile_fn is not None
    message = (effect.error or {}).get("message", "")
    if message.startswith(RECONCILE_FAILED):
        answer = "Never recorded: the worker stopped after writing the row, and the lookup failed."
        reconcile = f"Asked, and it failed: {message.removeprefix(RECONCILE_FAILED + ': ')}"
    elif message.startswith(NEVER_RECORDED) or not message:
        answer = (
            "Never recorded: the worker stopped after writing this row, before, during or "
            "after the call. The ledger cannot tell which; the provider can."
        )
        reconcile = "Not asked: this tool has no reconcile (lookup) hook."
    elif message.startswith(ABORTED_UNKNOWN):
        answer = "Unknown: the run was aborted while this call's outcome was unknown."
        reconcile = "Not asked."
    else:
        answer = f"The tool answered with an ambiguous error (it may have acted): {message}"
        reconcile = "Not asked: this tool has no reconcile (lookup) hook."
    if has_lookup and reconcile.startswith("Not asked: this tool"):
        reconcile = "Not asked."
    return {
        "written": f"{effect.started_at:%Y-%m-%d %H:%M:%S} UTC, before the tool was called",
        "returned": answer,
        "reconcile": reconcile,
        "lookup": "available" if has_lookup else "",
    }


@require_GET
@roles.permission_required(roles.OPERATE_RUNS)
def lookup(request: HttpRequest, effect_id: int) -> HttpResponse:
    """Ask the provider now, through the tool's reconcile hook (a read by contract),
    whether the call with this idempotency key happened. Changes nothing."""
    effect = get_object_or_404(Effect, pk=effect_id)
    tool = registry.find_tool(effect.tool)
    if tool is None or tool.reconcile_fn is None:
        found, answer = None, "This tool has no lookup: check the provider with the key yourself."
    else:
        try:
            found = tool.reconcile_fn(**effect.args, idempotency_key=effect.idempotency_key)
            answer = "Found at the provider:" if found is not None else "Not found at the provider."
        except Exception as exc:  # any failure of the provider is the answer
            found, answer = None, f"The lookup failed: {type(exc).__name__}: {exc}"
    context = {"effect": effect, "answer": answer, "found": found}
    template = "durableruns/escalations.html"
    return render(request, f"{template}#lookup" if request.htmx else template, context)


@require_POST
@roles.permission_required(roles.OPERATE_RUNS)
def resolve(request: HttpRequest, effect_id: int) -> HttpResponse:
    """Settle an unknown outcome. A `happened` result must be valid JSON; on a bad
    answer the queue is shown again with the error next to the effect (status 400)."""
    effect = get_object_or_404(Effect, pk=effect_id)
    resolution = request.POST.get("resolution", "")
    note = request.POST.get("note", "").strip()[:2000]
    result_text = request.POST.get("result", "")
    if resolution == Effect.Resolution.ABORTED and request.POST.get("confirmed") != "yes":
        # Aborting cancels the run: one more explicit step, which works without JavaScript.
        context = {"effect": effect, "note": note}
        return render(request, "durableruns/escalation_abort.html", context)
    try:
        result = _parse_result(resolution, result_text)
        escalation_service.resolve(effect, resolution, user=request.user, result=result, note=note)
    except (ValueError, DurableRunsError) as exc:
        rejected = {"effect": effect.pk, "error": str(exc), "result": result_text, "note": note}
        context = _queue_context(request, rejected)
        return render(request, "durableruns/escalations.html", context, status=400)
    then = (
        f"run {effect.run_id} was cancelled"
        if resolution == Effect.Resolution.ABORTED
        else f"run {effect.run_id} goes on"
    )
    # The label reads "resolved: it had not happened": said once, not "resolved as resolved".
    said = Effect.Resolution(resolution).label.removeprefix("resolved: ")
    messages.success(request, f"Resolved {effect.idempotency_key}: {said}; {then}.")
    return redirect("escalations")


def _parse_result(resolution: str, text: str) -> Any:
    if resolution != Effect.Resolution.HAPPENED:
        return None
    if not text.strip():
        raise ValueError("'It happened' needs the result the call returned, as JSON.")
    try:
        return parse_json(text, "The result")
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
