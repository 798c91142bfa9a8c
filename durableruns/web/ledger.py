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
        effect.reconcile = _reconcile_answer(effect)
        effect.form = rejected if rejected and rejected["effect"] == effect.pk else {}
    # An answer for an effect no longer in the queue (someone else settled it) is
    # refused at the top of the page instead.
    elsewhere = rejected if rejected and all(e.pk != rejected["effect"] for e in unknown) else None
    return {
        "escalations": unknown,
        "can_operate": request.user.has_perm(roles.OPERATE_RUNS),
        "rejected_elsewhere": elsewhere,
    }


def _reconcile_answer(effect: Effect) -> str:
    """What the tool's read-before-write hook said, as far as the ledger knows."""
    tool = registry.find_tool(effect.tool)
    if tool is None or tool.reconcile_fn is None:
        return "This tool has no reconcile hook: nothing could check the provider."
    message = (effect.error or {}).get("message", "")
    if "reconcile failed" in message:
        return message
    return "The reconcile hook found nothing conclusive."


@require_POST
@roles.permission_required(roles.OPERATE_RUNS)
def resolve(request: HttpRequest, effect_id: int) -> HttpResponse:
    """Settle an unknown outcome. A `happened` result must be valid JSON; on a bad
    answer the queue is shown again with the error next to the effect (status 400)."""
    effect = get_object_or_404(Effect, pk=effect_id)
    resolution = request.POST.get("resolution", "")
    note = request.POST.get("note", "").strip()[:2000]
    result_text = request.POST.get("result", "")
    try:
        result = _parse_result(resolution, result_text)
        escalation_service.resolve(effect, resolution, user=request.user, result=result, note=note)
    except (ValueError, DurableRunsError) as exc:
        rejected = {"effect": effect.pk, "error": str(exc), "result": result_text, "note": note}
        context = _queue_context(request, rejected)
        return render(request, "durableruns/escalations.html", context, status=400)
    messages.success(
        request,
        f"Resolved {effect.idempotency_key} as "
        f"{Effect.Resolution(resolution).label.lower()}; run {effect.run_id} goes on.",
    )
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
