"""The reviewers' inbox: pending approvals, and the POST that decides one.

Deciding works as a plain form post (redirect after POST, a message says what
happened); with htmx the decided card is swapped in place and the pending
count updated out of band.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from .. import roles
from ..models import Approval
from ..services.approvals import AlreadyDecided, DecisionRefused, FourEyesRefused, decide, pending

TEMPLATE = "durableruns/inbox.html"
INBOX_SIZE = 100
VERBS = {"approve": "Approved", "edit": "Edited and approved", "reject": "Rejected"}


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def inbox(request: HttpRequest) -> HttpResponse:
    waiting = pending()
    context = {
        "approvals": list(waiting[:INBOX_SIZE]),
        "pending_count": waiting.count(),
        "single": False,
    }
    return render(request, TEMPLATE, context)


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def approval(request: HttpRequest, pk: int) -> HttpResponse:
    found = get_object_or_404(Approval.objects.select_related("run"), pk=pk)
    context = {"approvals": [found], "pending_count": pending().count(), "single": True}
    return render(request, TEMPLATE, context)


@require_POST
@roles.permission_required(roles.DECIDE_APPROVALS)
def decide_approval(request: HttpRequest, pk: int) -> HttpResponse:
    found = get_object_or_404(Approval.objects.select_related("run"), pk=pk)
    decision = request.POST.get("decision", "")
    payload = request.POST.get("payload") if decision == "edit" else None
    try:
        decided = decide(
            found,
            decision,
            user=request.user,
            comment=request.POST.get("comment", ""),
            payload=payload,
        )
    except AlreadyDecided as exc:
        # Nothing changed: show who decided, and when.
        return _answer(
            request, exc.approval, notice=f"Nothing changed: {exc}.", level=messages.WARNING
        )
    except FourEyesRefused as exc:
        return _refused(request, found, str(exc), status=403, payload=payload)
    except DecisionRefused as exc:
        return _refused(request, found, str(exc), status=400, payload=payload)
    return _answer(
        request, decided, notice=f"{VERBS[decision]}: {decided.name} (run {decided.run_id})."
    )


def _answer(
    request: HttpRequest, approval: Approval, *, notice: str, level: int = messages.SUCCESS
) -> HttpResponse:
    if request.htmx:
        tag = messages.DEFAULT_TAGS.get(level, "info")
        return _card(request, approval, notice=notice, notice_tag=tag)
    messages.add_message(request, level, notice)
    return redirect(_back(request))


def _refused(
    request: HttpRequest, approval: Approval, error: str, *, status: int, payload: Any
) -> HttpResponse:
    # htmx swaps only 2xx answers, so it gets the card with the error at 200;
    # a plain form post gets the page again with the error and its real status.
    if request.htmx:
        return _card(request, approval, error=error, typed_payload=payload)
    context = {
        "approvals": [approval],
        "pending_count": pending().count(),
        "single": True,
        "error": error,
        "error_for": approval.pk,
        "typed_payload": payload,
    }
    return render(request, TEMPLATE, context, status=status)


def _card(request: HttpRequest, approval: Approval, **extra: Any) -> HttpResponse:
    context = {
        "approval": approval,
        "pending_count": pending().count(),
        "oob": True,
        "error_for": approval.pk,
        **extra,
    }
    return render(request, f"{TEMPLATE}#approval-card", context)


def _back(request: HttpRequest) -> str:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals")
