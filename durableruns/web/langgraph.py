"""The operator's actions on a LangGraph thread's run page."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from .. import roles
from ..models import Run
from ..services.langgraph import ForkRefused, fork_thread


@require_POST
@roles.permission_required(roles.OPERATE_RUNS)
def fork(request: HttpRequest, run_id: str) -> HttpResponse:
    record = get_object_or_404(Run.objects.select_related("langgraph_thread"), pk=run_id)
    try:
        child = fork_thread(record, request.POST.get("checkpoint_id", ""), user=request.user)
    except ForkRefused as exc:
        messages.error(request, str(exc))
        return redirect(record)
    messages.success(
        request,
        f"Forked into {child.id}: continue it with LangGraph; an interrupt at that "
        "checkpoint is asked of a reviewer again.",
    )
    return redirect(child)
