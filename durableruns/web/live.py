"""Live regions that cost nothing when nothing changed.

A page polling every second sends back the version of what it shows (the `X-Live-Version`
header, set by hx-headers on the region); when the version is still current the answer is
204 with no body, which htmx does not swap, so an unchanged poll renders no template.
The version costs two indexed queries over the rows the run page's live region reads.
"""

from __future__ import annotations

import hashlib

from django.db.models import Count, Max, OuterRef, Subquery, Sum
from django.db.models.functions import Greatest
from django.http import HttpRequest

from ..models import Approval, AuditEvent, Effect, LangGraphCheckpoint, Run, Step

HEADER = "X-Live-Version"


def _of_run(queryset, expression, link="run_id"):  # type: ignore[no-untyped-def]
    """One aggregate over the run's rows, as a correlated subquery of the run's row."""
    return Subquery(
        queryset.filter(**{link: OuterRef("pk")})
        .values(link)
        .annotate(value=expression)
        .values("value")[:1]
    )


def run_version(record: Run) -> str:
    """Changes whenever anything the run page shows changes: the run row (status, lease
    passes, retries, wake-up, budgets), its steps, effects, approvals, audit events and,
    for a LangGraph thread, its checkpoints. Time passing alone does not change it: the
    page counts elapsed time itself (static/durableruns/live.js)."""
    row = (
        Run.objects.filter(pk=record.pk)
        .annotate(
            steps_n=_of_run(Step.objects, Count("pk")),
            steps_at=_of_run(Step.objects, Max("finished_at")),
            effects_n=_of_run(Effect.objects, Count("pk")),
            effects_attempts=_of_run(Effect.objects, Sum("attempts")),
            effects_at=_of_run(Effect.objects, Greatest(Max("finished_at"), Max("resolved_at"))),
            approvals_n=_of_run(Approval.objects, Count("pk")),
            approvals_at=_of_run(Approval.objects, Greatest(Max("decided_at"), Max("claimed_at"))),
            checkpoints=_of_run(LangGraphCheckpoint.objects, Count("pk"), "thread__run_id"),
        )
        .values_list(
            "status",
            "updated_at",
            "fence",
            "leases_taken",
            "steps_used",
            "wake_at",
            "retry_attempts",
            "legal_hold",
            "redacted_at",
            "tokens_in",
            "tokens_out",
            "steps_n",
            "steps_at",
            "effects_n",
            "effects_attempts",
            "effects_at",
            "approvals_n",
            "approvals_at",
            "checkpoints",
        )
        .first()
    )
    audit = AuditEvent.objects.for_run(record).count()
    return hashlib.blake2b(repr((row, audit)).encode(), digest_size=8).hexdigest()


def unchanged(request: HttpRequest, version: str) -> bool:
    """The poll comes from a page that already shows this version."""
    return bool(request.htmx) and request.headers.get(HEADER) == version
