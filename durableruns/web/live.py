"""Live regions that cost nothing when nothing changed.

A page polling every second sends back the version of what it shows (the `X-Live-Version`
header, set by hx-headers on the region); when the version is still current the answer is
204 with no body, which htmx does not swap, so an unchanged poll renders no template.
The version is one query of index probes, whatever the run's length.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import connections, router
from django.db.models import CharField, Count, Max, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Cast, Coalesce, Concat
from django.http import HttpRequest

from ..models import (
    Approval,
    AuditEvent,
    Effect,
    LangGraphCheckpoint,
    LangGraphWrite,
    Run,
    Step,
)

HEADER = "X-Live-Version"


class RunVersion(NamedTuple):
    version: str  # changes whenever anything the run page shows changes
    frame: str  # changes when anything but new steps, effects and counts changes


def run_version(run_id: str) -> str:
    return run_versions(run_id).version


def run_versions(run_id: str) -> RunVersion:
    """Hashes of one row of index probes (see `_version_query`); the SQL is built once per
    database, since Django took ~8 ms to assemble its 20 subqueries on every poll and
    Postgres ~1 ms to run them. The frame is the part of the row that can change the
    rows a page already shows (web/live_rows.py): a new status, lease pass, retry,
    approval, audit event or child run; not a new step, effect or token count."""
    alias = router.db_for_read(Run)
    sql, params = _version_sql(alias)
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, [run_id if p is _PK else p for p in params])
        row = cursor.fetchone()
    framed = tuple(row[VERSIONED_FIELDS.index(name)] for name in FRAME_FIELDS) if row else None
    return RunVersion(_hash(row), _hash(framed))


def _hash(value: Any) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=8).hexdigest()


_PK = object()  # where the run's id goes in the cached query's parameters


@functools.cache
def _version_sql(alias: str) -> tuple[str, list[Any]]:
    marker = "\x00live-version-run-id"
    query = _version_query(marker)
    sql, params = query.query.get_compiler(using=alias).as_sql()
    if list(params).count(marker) != 1:
        raise RuntimeError("the run id must be exactly one parameter of the version query")
    return sql, [_PK if p == marker else p for p in params]


def _version_query(run_id: str) -> QuerySet[Run]:
    """Changes whenever anything the run page shows changes, read from index probes only
    (a 10,000-step run costs what a short one does):

    - the run row: status, lease passes, retries, wake-up, budgets, tokens; everything
      else that changes a run touches `updated_at` (checkpoints of a LangGraph thread,
      an escalation resolved while others of the run are still unknown);
    - its newest step and newest effect: both are appended in order, and an older
      effect changes only with the run row (a retry, an escalation) or a new step;
      the branches of a fan-out commit in any order, so the steps and effects of the
      newest step's fan-out are counted too (an index range as wide as the fan-out);
    - its approvals (a handful per run) and the newest audit event on the run;
    - its child runs (engine/children.py): how many, and the newest change to one;
    - for a LangGraph thread, its newest root checkpoint and the writes against it (a
      checkpoint that keeps the thread's status does not touch the run row).

    Time passing alone does not change it: the page counts elapsed time itself
    (static/durableruns/app.js)."""
    newest_step = Step.objects.filter(run_id=OuterRef("pk")).order_by("-position")
    newest_effect = Effect.objects.filter(run_id=OuterRef("pk")).order_by("-position")
    effect_text = Concat(
        *(Cast(name, CharField()) for name in ("state", "attempts", "finished_at", "resolved_at")),
        output_field=CharField(),
    )
    approvals = Approval.objects.filter(run_id=OuterRef("pk")).values("run_id")
    audit = AuditEvent.objects.filter(target_type="run", target_id=OuterRef("pk"))
    kids = Run.objects.filter(parent_run_id=OuterRef("pk")).order_by().values("parent_run_id")
    checkpoint = LangGraphCheckpoint.objects.filter(thread_id=OuterRef("pk"), checkpoint_ns="")
    newest_checkpoint = checkpoint.order_by("-checkpoint_id").values("checkpoint_id")[:1]
    writes = LangGraphWrite.objects.filter(
        thread_id=OuterRef(OuterRef("pk")),
        checkpoint_ns="",
        checkpoint_id=OuterRef("checkpoint_id"),
    )
    since = {"run_id": OuterRef("pk"), "position__gte": OuterRef("fan_out_start")}
    return (
        Run.objects.filter(pk=run_id)
        .annotate(
            fan_out_start=Coalesce(
                Subquery(newest_step.values("fan_out")[:1]),
                Subquery(newest_step.values("position")[:1]),
            )
        )
        .annotate(
            fan_out_steps=_count(Step.objects.filter(**since)),
            fan_out_effects=_count(Effect.objects.filter(**since)),
            newest_step=Subquery(newest_step.values("position")[:1]),
            newest_step_at=Subquery(newest_step.values("finished_at")[:1]),
            newest_effect=Subquery(newest_effect.values("position")[:1]),
            newest_effect_text=Subquery(newest_effect.annotate(t=effect_text).values("t")[:1]),
            approvals_seen=Subquery(
                approvals.annotate(
                    t=Concat(
                        Cast(Count("pk"), CharField()),
                        Cast(Max("decided_at"), CharField()),
                        Cast(Max("claimed_at"), CharField()),
                        output_field=CharField(),
                    )
                ).values("t")[:1]
            ),
            newest_audit=Subquery(audit.order_by("-pk").values("pk")[:1]),
            children_seen=Subquery(
                kids.annotate(
                    t=Concat(
                        Cast(Count("pk"), CharField()),
                        # Statuses too: an update in the same transaction keeps updated_at.
                        *(
                            Cast(Count("pk", filter=Q(status__in=bucket)), CharField())
                            for bucket in CHILD_BUCKETS
                        ),
                        Cast(Max("updated_at"), CharField()),
                        Cast(Sum("steps_used"), CharField()),
                        output_field=CharField(),
                    )
                ).values("t")[:1]
            ),
            newest_checkpoint=Subquery(newest_checkpoint),
            checkpoint_writes=Subquery(
                checkpoint.order_by("-checkpoint_id")
                .annotate(
                    n=Subquery(writes.values("thread_id").annotate(n=Count("pk")).values("n"))
                )
                .values("n")[:1]
            ),
        )
        .values_list(*VERSIONED_FIELDS)[:1]
    )


def _count(rows: QuerySet[Any]) -> Subquery:
    return Subquery(rows.order_by().values("run_id").annotate(n=Count("pk")).values("n")[:1])


VERSIONED_FIELDS = (
    "status", "updated_at", "fence", "leases_taken", "steps_used", "wake_at",
    "retry_attempts", "legal_hold", "redacted_at", "tokens_in", "tokens_out",
    "newest_step", "newest_step_at", "newest_effect", "newest_effect_text",
    "approvals_seen", "newest_audit", "newest_checkpoint", "checkpoint_writes",
    "children_seen", "fan_out_steps", "fan_out_effects",
)  # fmt: skip
FRAME_FIELDS = (
    "status", "fence", "leases_taken", "wake_at", "retry_attempts", "legal_hold",
    "redacted_at", "approvals_seen", "newest_audit", "newest_checkpoint",
    "checkpoint_writes", "children_seen",
)  # fmt: skip


# A change of a child run between these groups of statuses changes its parent's page.
CHILD_BUCKETS = (
    list(Run.TERMINAL),
    [Run.Status.AWAITING_APPROVAL, Run.Status.ESCALATED, Run.Status.AWAITING_CHILD],
    [Run.Status.RUNNING],
)


def unchanged(request: HttpRequest, version: str) -> bool:
    """The poll comes from a page that already shows this version."""
    return bool(request.htmx) and request.headers.get(HEADER) == version


def inbox_version(shown: list[int]) -> tuple[str, list[int], str]:
    """The inbox poll's version, the shown approvals that left the queue, and the version
    of the page once it has swapped them out (for the answer's next poll: read now, before
    the answer's content, so a change in between makes the next poll render again).

    Three index probes, whatever the number pending: the newest pending approval (a new
    one arrived), the newest decision anywhere (the pending count moved) and which of
    the cards the page shows are no longer pending."""
    pending = Approval.objects.filter(state=Approval.State.PENDING)
    newest = pending.aggregate(newest=Max("pk"))["newest"]
    decided = Approval.objects.exclude(state=Approval.State.PENDING)
    latest = decided.aggregate(latest=Max("decided_at"))["latest"]
    gone = sorted(decided.filter(pk__in=shown).values_list("pk", flat=True)) if shown else []
    return _inbox_hash(newest, latest, gone), gone, _inbox_hash(newest, latest, [])


# The last inbox version this process counted the pending approvals at, and the count.
_counted: tuple[str, int] = ("", 0)


def pending_count(version: str, count: Callable[[], int]) -> int:
    """`count()` (the pending approvals, every reviewer's same number) once per inbox
    version in this process: after a decision every open inbox's next poll is a changed
    one, and a hundred of them counted 10,000 pending approvals a hundred times. The
    version moves with every new, decided or closed approval, so the number is the one
    a count would give when the version was read (a change since moves the version and
    the next poll counts again)."""
    global _counted
    seen, counted = _counted
    if seen == version:
        return counted
    counted = count()
    _counted = (version, counted)
    return counted


def _inbox_hash(newest: int | None, latest: Any, gone: list[int]) -> str:
    text = repr((newest, latest, gone))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
