"""The reviewers' inbox: pending approvals and the history of decided ones (filtered,
sorted, paged), and the POSTs that decide or claim one.

Deciding works as a plain form post (redirect after POST, a message says what
happened); with htmx the decided card is swapped in place and the pending
count updated out of band. The pending list polls a partial, so new approvals
appear without a reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_GET, require_POST

from .. import roles, validation
from ..engine import registry
from ..langgraph.serde import thread_bytes
from ..models import Approval, Run
from ..services.approvals import (
    AlreadyDecided,
    DecisionRefused,
    FourEyesRefused,
    InvalidEdit,
    claim,
    decide,
    decided,
    pending,
)
from . import live, schema_form

TEMPLATE = "durableruns/inbox.html"
INBOX_SIZE = 20
AGES = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}
SORTS = ("oldest", "newest")
# Cards a poll reports on: a page shows INBOX_SIZE and appends what arrives.
MAX_SHOWN = 200


@dataclass
class InboxFilters:
    """What the reviewer asked to see, read from the query string (bad values ignored)."""

    view: str = "pending"  # or "history"
    agent: str = ""
    started_by: str = ""
    age: str = ""  # waiting (or asked) longer than
    q: str = ""
    sort: str = ""  # default: oldest pending first, newest decision first

    @classmethod
    def from_query(cls, query: QueryDict) -> InboxFilters:
        values = {name: query.get(name, "").strip()[:200] for name in cls.__dataclass_fields__}
        found = cls(**{k: v for k, v in values.items() if v})
        found.view = found.view if found.view in ("pending", "history") else "pending"
        found.age = found.age if found.age in AGES else ""
        default = "oldest" if found.view == "pending" else "newest"
        found.sort = found.sort if found.sort in SORTS else default
        return found

    def rows(self) -> QuerySet[Approval]:
        rows = pending() if self.view == "pending" else decided()
        if self.agent:
            rows = rows.filter(run__agent=self.agent)
        if self.started_by:
            rows = rows.filter(run__created_by__username=self.started_by)
        if self.age:
            rows = rows.filter(created_at__lte=timezone.now() - AGES[self.age])
        if self.q:
            rows = rows.filter(
                Q(name__icontains=self.q)
                | Q(summary__icontains=self.q)
                | Q(run__id__startswith=self.q)  # as the Runs search: an id's first characters
                | Q(run__langgraph_thread__thread_id_bytes=thread_bytes(self.q))
            )
        stamp = "created_at" if self.view == "pending" else "decided_at"
        order = (stamp, "pk") if self.sort == "oldest" else (f"-{stamp}", "-pk")
        return rows.order_by(*order)

    @property
    def narrowed(self) -> bool:
        return any((self.agent, self.started_by, self.age, self.q))

    @property
    def all_pending(self) -> bool:
        """Every pending approval, whatever the order: the list's count is the inbox's."""
        return self.view == "pending" and not self.narrowed

    def query(self, **override: str) -> str:
        """The query string of these filters, with `override` applied (for links)."""
        values = {**self.__dict__, **override}
        return urlencode({k: v for k, v in values.items() if v})


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def inbox(request: HttpRequest) -> HttpResponse:
    filters = InboxFilters.from_query(request.GET)
    rows = filters.rows()
    after = request.GET.get("after", "")
    if request.htmx and after and filters.view == "pending":
        return _poll(request, filters, rows, validation.integer(after, "after"))
    paged = Paginator(rows, INBOX_SIZE).get_page(request.GET.get("page"))
    shown = list(paged.object_list)
    context = {
        "approvals": shown,
        "paged": paged,
        "newest_pk": _newest(rows),
        "live_version": live.inbox_version([a.pk for a in shown if a.is_pending])[0],
        "filters": filters,
        "agents": sorted({a.name for a in registry.agents()} | ({filters.agent} - {""})),
        "starters": _starters(),
        # The pending count of the nav, unless the page's own count already is it.
        "pending_count": paged.paginator.count if filters.all_pending else pending().count(),
        "single": False,
        "ages": AGES,
    }
    return render(request, TEMPLATE, context)


def _newest(rows: QuerySet[Approval]) -> int:
    # ORDER BY ... LIMIT 1, not MAX(): the planner walks the pending index backwards and
    # stops at the first match, where MAX() over the join reads every pending approval.
    return rows.order_by("-pk").values_list("pk", flat=True).first() or 0


def _poll(
    request: HttpRequest, filters: InboxFilters, rows: QuerySet[Approval], since: int
) -> HttpResponse:
    """The poll's answer: 204 when nothing changed; else only the approvals that arrived
    since the page's newest (appended) and the shown ones that left the queue (swapped
    for their decided card), with the pending count."""
    shown = [validation.integer(pk, "shown") for pk in request.GET.getlist("shown")[:MAX_SHOWN]]
    version, gone, next_version = live.inbox_version(shown)
    if live.unchanged(request, version):
        return HttpResponse(status=204)
    new = list(rows.filter(pk__gt=since).order_by("pk")[:INBOX_SIZE])
    context = {
        "approvals": new,
        "removed": Approval.objects.filter(pk__in=gone).select_related("run", "claimed_by"),
        "filters": filters,
        "newest_pk": max([since, *(a.pk for a in new)]),
        # The page, once this answer is swapped in, shows the new cards (pending when
        # read) and none of those gone: read before them, as a full page's version is.
        "live_version": next_version,
        "new_count": len(new),
        "pending_count": live.pending_count(next_version, pending().count),
    }
    return render(request, f"{TEMPLATE}#inbox-new", context)


def _starters() -> list[str]:
    """Users who started a run: one index probe per user (a join through every run
    with an approval read 100,000 rows)."""
    started = Run.objects.filter(created_by=OuterRef("pk"))
    users = get_user_model().objects.filter(Exists(started))
    return sorted(users.values_list("username", flat=True))


@require_GET
@roles.permission_required(roles.VIEW_RUNS)
def approval(request: HttpRequest, pk: int) -> HttpResponse:
    found = get_object_or_404(Approval.objects.select_related("run", "run__parent_run"), pk=pk)
    context = {"approvals": [found], "pending_count": pending().count(), "single": True}
    return render(request, TEMPLATE, context)


@require_POST
@roles.permission_required(roles.DECIDE_APPROVALS)
def decide_approval(request: HttpRequest, pk: int) -> HttpResponse:
    found = get_object_or_404(Approval.objects.select_related("run", "claimed_by"), pk=pk)
    decision = request.POST.get("decision", "")
    try:
        payload = _edited_payload(request, found) if decision == "edit" else None
        payload = _changed_edit(request, found) if decision == "approve" else payload
    except schema_form.FieldError as exc:
        fields = schema_form.fields_for(found.schema, found.payload) or []
        typed = schema_form.as_typed(fields, request.POST, found.payload)
        return _refused(request, found, str(exc), status=400, payload=typed, field=exc.field)
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
        field = exc.field if isinstance(exc, InvalidEdit) else ""
        return _refused(request, found, str(exc), status=400, payload=payload, field=field)
    return _answer(
        request, decided, notice=f"{decided.decided_as}: {decided.name} (run {decided.run_id})."
    )


def _edited_payload(request: HttpRequest, approval: Approval) -> Any:
    """The raw JSON wins when the reviewer typed some; otherwise the schema form's fields."""
    raw = request.POST.get("payload", "")
    fields = schema_form.fields_for(approval.schema, approval.payload)
    if fields is None or raw.strip():
        return raw
    return schema_form.payload_from(fields, request.POST, approval.payload)


def _changed_edit(request: HttpRequest, approval: Approval) -> Any:
    """The edit form's values if the reviewer changed them, else None: Approve then sends
    them, and the service refuses rather than drop the change (or approve it unasked)."""
    if "edit" not in approval.allowed:
        return None  # no edit form was shown
    raw = request.POST.get("payload", "")
    fields = schema_form.fields_for(approval.schema, approval.payload)
    if fields is None or raw.strip():
        return raw if raw.strip() else None  # the raw box starts as the payload, or empty
    if not any(field.input_name in request.POST for field in fields):
        return None  # posted without the form (a script, a page without it)
    typed = schema_form.payload_from(fields, request.POST, approval.payload)
    return None if typed == schema_form.as_shown(fields, approval.payload) else typed


@require_POST
@roles.permission_required(roles.DECIDE_APPROVALS)
def claim_approval(request: HttpRequest, pk: int) -> HttpResponse:
    """Claim (or release) an approval; an admin may give it to another reviewer."""
    found = get_object_or_404(Approval.objects.select_related("run", "claimed_by"), pk=pk)
    name = request.POST.get("assignee", "").strip()[:150]
    if request.POST.get("release"):
        return _claim(request, found, None)
    if not name:
        return _claim(request, found, request.user)
    assignee = get_user_model().objects.filter(username=name, is_active=True).first()
    if assignee is None:
        return _refused(request, found, f"no active user {name!r}", status=400, payload=None)
    return _claim(request, found, assignee)


def _claim(request: HttpRequest, found: Approval, assignee: Any) -> HttpResponse:
    try:
        claimed = claim(found, user=request.user, assignee=assignee)
    except AlreadyDecided as exc:
        notice = f"Nothing changed: {exc}."
        return _answer(request, exc.approval, notice=notice, level=messages.WARNING)
    except DecisionRefused as exc:
        return _refused(request, found, str(exc), status=409, payload=None)
    who = claimed.claimed_by.get_username() if claimed.claimed_by else None
    notice = f"Claimed by {who}." if who else "Released: anyone may take it."
    return _answer(request, claimed, notice=notice)


def _answer(
    request: HttpRequest, approval: Approval, *, notice: str, level: int = messages.SUCCESS
) -> HttpResponse:
    if request.htmx:
        tag = messages.DEFAULT_TAGS.get(level, "info")
        return _card(request, approval, notice=notice, notice_tag=tag)
    messages.add_message(request, level, notice)
    return HttpResponseRedirect(_back(request))


def _refused(
    request: HttpRequest,
    approval: Approval,
    error: str,
    *,
    status: int,
    payload: Any,
    field: str = "",
) -> HttpResponse:
    """The card again with the error, what was typed, and `field` (if one is at fault)
    marked invalid with the error beside it."""
    # htmx swaps 4xx validation answers too (static/durableruns/htmx-errors.js), so
    # both get the error with its real status; htmx only gets the card.
    if request.htmx:
        return _card(
            request, approval, status=status, error=error, typed_payload=payload, error_field=field
        )
    context = {
        "error_field": field,
        "approvals": [approval],
        "pending_count": pending().count(),
        "single": True,
        "error": error,
        "error_for": approval.pk,
        "typed_payload": payload,
    }
    return render(request, TEMPLATE, context, status=status)


def _card(
    request: HttpRequest, approval: Approval, *, status: int = 200, **extra: Any
) -> HttpResponse:
    context = {
        "approval": approval,
        "pending_count": pending().count(),
        "oob": True,
        "error_for": approval.pk,
        **extra,
    }
    return render(request, f"{TEMPLATE}#approval-card", context, status=status)


def _back(request: HttpRequest) -> str:
    """Where to go after a claim: a local path given as `next`, else the inbox. Only a
    path: redirect() would read any other text as a view name (and answer 500)."""
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return reverse("approvals")
