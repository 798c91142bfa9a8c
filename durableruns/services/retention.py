"""Retention: delete or redact old terminal runs, in short batches.

A policy never touches a run that is not terminal (a run waiting for an approval
is `awaiting_approval`, so never terminal), that has an effect whose outcome is
unknown (an open escalation), or that is on legal hold. Delete policies apply
before redact policies, so a run in scope of both is deleted. Each batch is its
own short transaction that locks only the rows it changes (SKIP LOCKED), so the
runs being executed meanwhile never wait on a sweep for long.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce
from operator import or_
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Cast
from django.utils import timezone

from ..engine.store import redacted
from ..models import (
    Approval,
    AuditEvent,
    Effect,
    LangGraphBlob,
    LangGraphCheckpoint,
    LangGraphThread,
    LangGraphWrite,
    RetentionPolicy,
    RetentionSweep,
    Run,
    Step,
)

log = logging.getLogger(__name__)
Action = RetentionPolicy.Action
# What a redacted payload reads as; keys, states, fingerprints and decisions stay.
REDACTED_PAYLOAD = "[REDACTED by retention]"
TERMINAL_STATUSES = sorted(Run.TERMINAL)


@dataclass(frozen=True)
class Preview:
    delete: int
    redact: int

    def __str__(self) -> str:
        return f"would delete {self.delete:,} runs, redact {self.redact:,}"


def protected() -> Q:
    """Runs no policy may touch, whatever its scope."""
    unknown = Effect.objects.filter(run=OuterRef("pk"), state=Effect.State.UNKNOWN)
    guard = ~Q(status__in=TERMINAL_STATUSES) | Q(legal_hold=True) | Q(Exists(unknown))
    pending = Approval.objects.filter(run=OuterRef("pk"), state=Approval.State.PENDING)
    return guard | Q(Exists(pending))


def in_scope(policy: RetentionPolicy) -> Q:
    """The runs a policy's scope and age select (before protections)."""
    cutoff = timezone.now() - timedelta(days=policy.age_days)
    statuses = [s for s in policy.statuses if s in Run.TERMINAL] or TERMINAL_STATUSES
    scope = Q(status__in=statuses) & (
        Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, created_at__lt=cutoff)
    )
    if policy.agent:
        scope &= Q(agent=policy.agent)
    if policy.action == Action.REDACT:
        scope &= Q(redacted_at__isnull=True)
    return scope


def eligible(policy: RetentionPolicy) -> models.QuerySet[Run]:
    return Run.objects.filter(in_scope(policy)).exclude(protected())


def preview(policies: Iterable[RetentionPolicy]) -> Preview:
    """What applying these policies now would do, counting each run once."""
    policies = list(policies)
    deleting = [in_scope(p) for p in policies if p.action == Action.DELETE]
    redacting = [in_scope(p) for p in policies if p.action == Action.REDACT]
    candidates = Run.objects.exclude(protected())
    delete_q = reduce(or_, deleting) if deleting else None
    deleted = candidates.filter(delete_q).count() if delete_q is not None else 0
    redacted = 0
    if redacting:
        redact_qs = candidates.filter(reduce(or_, redacting))
        if delete_q is not None:
            redact_qs = redact_qs.exclude(delete_q)
        redacted = redact_qs.count()
    return Preview(deleted, redacted)


@dataclass(frozen=True)
class Impact:
    """What applying policies now would do: the counts, a sample of the runs, and a
    digest of exactly which runs, so a confirmation can tell if the data changed."""

    preview: Preview
    sample: list[str]
    digest: str


def impact(policies: Iterable[RetentionPolicy], sample_size: int = 10) -> Impact:
    policies = list(policies)
    counts = preview(policies)
    scopes = [in_scope(p) for p in policies]
    if not scopes:
        return Impact(counts, [], hashlib.sha256(b"none").hexdigest())
    affected = Run.objects.filter(reduce(or_, scopes)).exclude(protected()).order_by("id")
    digest = hashlib.sha256(str(counts).encode())
    for run_id in affected.values_list("id", flat=True).iterator(chunk_size=2000):
        digest.update(run_id.encode() + b"\0")
    sample = list(affected.values_list("id", flat=True)[:sample_size])
    return Impact(counts, sample, digest.hexdigest())


def apply_all(*, dry_run: bool = False, triggered_by: str = "beat") -> list[RetentionSweep]:
    """Apply every enabled policy, deletes first; one logged sweep per policy."""
    policies = RetentionPolicy.objects.filter(enabled=True)
    ordered = sorted(policies, key=lambda p: (p.action != Action.DELETE, p.name))
    return [apply(policy, dry_run=dry_run, triggered_by=triggered_by) for policy in ordered]


def apply(
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    triggered_by: str = "beat",
    batch_size: int | None = None,
) -> RetentionSweep:
    batch_size = batch_size or settings.DURABLERUNS_RETENTION_BATCH
    started_at, clock = timezone.now(), time.monotonic()
    if dry_run:
        affected, batches = eligible(policy).count(), 0
    else:
        affected, batches = _apply_in_batches(policy, batch_size)
    sweep = RetentionSweep.objects.create(
        policy=policy,
        policy_name=policy.name,
        action=policy.action,
        dry_run=dry_run,
        runs_affected=affected,
        batches=batches,
        triggered_by=triggered_by,
        duration_ms=(time.monotonic() - clock) * 1000,
        started_at=started_at,
    )
    log.info(
        "retention: policy %r %s %d runs in %d batches (%.0f ms)%s",
        policy.name,
        policy.action,
        affected,
        batches,
        sweep.duration_ms,
        " [dry run]" if dry_run else "",
    )
    return sweep


def _apply_in_batches(policy: RetentionPolicy, batch_size: int) -> tuple[int, int]:
    affected = batches = 0
    after = ""
    while True:
        with transaction.atomic():
            ids = _lock_batch(policy, batch_size, after)
            if not ids:
                return affected, batches
            after = ids[-1]
            if policy.action == Action.DELETE:
                _delete(ids)
            else:
                _redact(ids)
            _audit(policy, ids)
        affected += len(ids)
        batches += 1


def _lock_batch(policy: RetentionPolicy, batch_size: int, after: str) -> list[str]:
    """The next batch in id order (keyset: never rescans what earlier batches removed).
    A row locked by someone else right now is skipped; the next sweep takes it."""
    rows = eligible(policy).filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)
    if connection.features.has_select_for_update_skip_locked:
        # The WHERE clause is checked again on the locked row, so a run put on hold
        # (or resumed) a moment ago is skipped.
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return list(rows[:batch_size])


def _delete(ids: list[str]) -> None:
    _scrub_audit(ids)
    # Children forked from these runs keep existing; their parent link is cleared.
    Run.objects.filter(parent_id__in=ids).update(parent=None)
    Run.objects.filter(pk__in=ids).only("pk").delete()


def _redact(ids: list[str]) -> None:
    _scrub_audit(ids)
    payloads = [
        (Step, ("input", "result", "error")),
        (Effect, ("args", "result", "error", "note")),
        *_related_payloads(),
    ]
    for model, fields in payloads:
        # Emptying `secrets` shreds them: the ciphertext is gone, whatever keys exist.
        model.objects.filter(run_id__in=ids).update(
            secrets="", **{name: _marker_if_set(model, name) for name in fields}
        )
    _shred_langgraph(ids)
    Run.objects.filter(pk__in=ids).update(
        redacted_at=timezone.now(),
        secrets="",
        **{name: _marker_if_set(Run, name) for name in ("input", "result", "error", "last_error")},
    )


def _audit(policy: RetentionPolicy, ids: list[str]) -> None:
    """One entry per run, in the batch's transaction, so each run's trail (and, once it is
    deleted, the audit log) says which policy redacted or deleted it; after the scrub, so
    the entry itself is kept whole."""
    after = redacted({"policy": policy.name})
    AuditEvent.objects.bulk_create(
        AuditEvent(
            actor_name="system",
            action=f"run.{policy.action}_by_retention",
            target_type="run",
            target_id=run_id,
            after=after,
        )
        for run_id in ids
    )


def _scrub_audit(ids: list[str]) -> None:
    """The runs' audit trail (the run, its approvals and effects, as AuditEvent.for_run
    reads it) keeps who did what and when, but not the data: an input, an edit or an
    e-mail in `before`/`after` must not outlive the run. The audit trigger allows
    exactly this change (migration 0014)."""
    as_text = Cast("pk", models.CharField())
    approvals = Approval.objects.filter(run_id__in=ids).values_list(as_text)
    effects = Effect.objects.filter(run_id__in=ids).values_list(as_text)
    AuditEvent.objects.filter(
        Q(target_type="run", target_id__in=ids)
        | Q(target_type="approval", target_id__in=approvals)
        | Q(target_type="effect", target_id__in=effects)
    ).update(before=_marker_if_set(AuditEvent, "before"), after=_marker_if_set(AuditEvent, "after"))


def _shred_langgraph(ids: list[str]) -> None:
    """A LangGraph thread keeps no checkpoint, channel value, write or metadata: nothing
    half-redacted that LangGraph could resume from (and its saver refuses the thread)."""
    for model in (LangGraphWrite, LangGraphBlob, LangGraphCheckpoint):
        model.objects.filter(thread_id__in=ids).delete()
    LangGraphThread.objects.filter(run_id__in=ids).update(thread_id_bytes=b"")


def _marker_if_set(model: type[models.Model], name: str) -> Any:
    """Keep an empty payload empty (nothing was recorded), replace anything else."""
    field = model._meta.get_field(name)
    empty = Q(**{f"{name}__isnull": True}) if field.null else Q(**{name: ""})
    if isinstance(field, models.JSONField) and not field.null:
        empty = Q(pk__in=[])  # never empty: always replaced
    return models.Case(
        models.When(empty, then=models.F(name)),
        default=models.Value(REDACTED_PAYLOAD, output_field=field),
    )


def _related_payloads() -> list[tuple[type[models.Model], tuple[str, ...]]]:
    """Other models holding run payloads declare `RETENTION_REDACT_FIELDS` (e.g. Approval),
    so this module need not know them."""
    found = []
    for relation in Run._meta.related_objects:
        model = relation.related_model
        fields = getattr(model, "RETENTION_REDACT_FIELDS", ())
        if fields and relation.field.name == "run":
            found.append((model, tuple(fields)))
    return found
