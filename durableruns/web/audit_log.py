"""The audit log (admins): every human action, newest first, filtered by actor, action,
run and time, paged by position (no count over a table that only grows).

A filter that is not valid (a NUL, a date that is not one) says so and shows nothing,
never the whole log as if unfiltered.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..models import AuditEvent, Run
from ..roles import MANAGE_POLICIES, permission_required

PAGE = 50
# The <input type="datetime-local"> format, and a plain date.
WHEN_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d"]


class AuditFilters(forms.Form):
    actor = forms.CharField(required=False, max_length=150, label="Actor (username)")
    action = forms.CharField(
        required=False, max_length=60, label="Action", help_text='e.g. "approval.reject", or "run."'
    )
    run = forms.CharField(required=False, max_length=255, label="Run id")
    since = forms.DateTimeField(required=False, input_formats=WHEN_FORMATS, label="From (UTC)")
    until = forms.DateTimeField(required=False, input_formats=WHEN_FORMATS, label="Until (UTC)")
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean_since(self) -> datetime | None:
        return _in_utc(self.cleaned_data.get("since"))

    def clean_until(self) -> datetime | None:
        return _in_utc(self.cleaned_data.get("until"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            raise forms.ValidationError("the start of the time range is after its end")
        return cleaned


def _in_utc(value: datetime | None) -> datetime | None:
    """Django also takes ISO times with any offset (up to ±23:59), which Postgres refuses
    beyond ±15:59, and a time near the end of year 9999 overflows once in UTC."""
    if value is None:
        return None
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise forms.ValidationError("the time is out of range") from None


def _filtered(filters: dict[str, Any]) -> QuerySet[AuditEvent]:
    rows = AuditEvent.objects.all()
    if filters.get("run"):
        # The run's own trail: actions on it, its approvals and its effects.
        rows = AuditEvent.objects.for_run(Run(pk=filters["run"]))
    if filters.get("actor"):
        rows = rows.filter(actor_name=filters["actor"])
    if filters.get("action"):
        rows = rows.filter(action__startswith=filters["action"])
    if filters.get("since"):
        rows = rows.filter(created_at__gte=filters["since"])
    if filters.get("until"):
        rows = rows.filter(created_at__lte=filters["until"])
    if filters.get("before"):
        rows = rows.filter(pk__lt=filters["before"])
    # Ids grow with time (one sequence), so the newest first is the highest id first.
    return rows.order_by("-pk")


@require_GET
@permission_required(MANAGE_POLICIES)
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilters(request.GET or None)
    events: list[AuditEvent] = []
    older = None
    # An invalid filter shows why, and no event rather than every event.
    if not form.is_bound or form.is_valid():
        filters = form.cleaned_data if form.is_bound else {}
        events = list(_filtered(filters)[: PAGE + 1])
        if len(events) > PAGE:
            events = events[:PAGE]
            older = _query(request, before=events[-1].pk)
    context = {"form": form, "events": events, "older": older, "filtered": form.is_bound}
    status = 400 if form.errors else 200
    return render(request, "durableruns/admin/audit.html", context, status=status)


def _query(request: HttpRequest, **changes: Any) -> str:
    query = request.GET.copy()
    for name, value in changes.items():
        query[name] = str(value)
    return query.urlencode()
