"""Resolving escalations: a human decides what an ambiguous unsafe write did.

An unsafe write left `started` with no result and no reconcile answer becomes
`unknown` and its run `escalated` (invariant 5). Nothing is retried until an
operator says one of:

- `happened`: the call took effect, and this (JSON) result is what it returned;
  agent code receives it as the tool's return value, nothing is called again.
- `not_happened`: the call did not take effect; it is called again with the same
  idempotency key.
- `aborted`: the run is cancelled.

Each resolution is recorded on the effect (who, when, note) and audited in the
same transaction, and wakes the run at once. Repeating the same resolution is a
no-op; a different one after a resolution was recorded raises `AlreadyResolved`.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models.functions import Now

from .. import roles
from ..engine import doorbell, store, vault
from ..engine.errors import DurableRunsError, SerializationError
from ..engine.redaction import redact_text
from ..models import Effect, Run
from ..validation import InvalidInput, parse_json
from . import audit, runs

Resolution = Effect.Resolution


class EscalationError(DurableRunsError):
    """The resolution cannot be applied (bad input, or the effect is not escalated)."""


class NotEscalated(EscalationError):
    """Only an effect whose outcome is unknown can be resolved."""


class AlreadyResolved(EscalationError):
    """Someone already recorded a different resolution for this effect."""

    def __init__(self, effect: Effect) -> None:
        who = effect.resolved_by.get_username() if effect.resolved_by else "someone"
        when = effect.resolved_at.isoformat() if effect.resolved_at else "earlier"
        super().__init__(
            f"effect {effect.pk} was already resolved as {effect.resolution!r} by {who} at {when}"
        )
        self.resolution = effect.resolution
        self.resolved_by = effect.resolved_by
        self.resolved_at = effect.resolved_at


def parse_result(text: str) -> Any:
    """A `happened` result given as text (commands, forms), with a clear error."""
    try:
        return parse_json(text, "the result")
    except InvalidInput as exc:
        raise SerializationError(str(exc)) from None


def resolve(
    effect: Effect, resolution: str, *, user: Any, result: Any = None, note: str = ""
) -> Effect:
    """Record a human's answer for an `unknown` effect and wake its run."""
    if not getattr(user, "is_authenticated", False) or not user.has_perm(roles.OPERATE_RUNS):
        raise PermissionDenied(f"resolving an escalation needs {roles.OPERATE_RUNS}")
    stored = _checked_result(resolution, result)
    with transaction.atomic():
        current = (
            Effect.objects.select_for_update(of=("self",))
            .select_related("resolved_by")
            .get(pk=effect.pk)
        )
        if current.state != Effect.State.UNKNOWN:
            if current.resolution:
                repeated = _repeated(current, resolution, stored)
                if resolution != Resolution.ABORTED:
                    _wake_if_settled(current.run_id)
                return repeated
            raise NotEscalated(
                f"effect {current.pk} is {current.state}; only an unknown outcome can be resolved"
            )
        _record(current, resolution, stored, user, note)
        _continue_run(current, resolution, user)
    return Effect.objects.select_related("resolved_by").get(pk=effect.pk)


def _checked_result(resolution: str, result: Any) -> Any:
    if resolution not in Resolution.values:
        raise EscalationError(
            f"unknown resolution {resolution!r}; use one of {', '.join(Resolution.values)}"
        )
    if resolution != Resolution.HAPPENED:
        if result is not None:
            raise EscalationError(f"a result goes only with {Resolution.HAPPENED!r}")
        return None
    if result is None:
        raise EscalationError(
            f"{Resolution.HAPPENED!r} needs the result the call returned (JSON), "
            "which agent code then receives"
        )
    store.encode(result)  # JSON only, within the payload limit: SerializationError otherwise
    return store.normalise(result)  # what agent code receives; stored sealed (_record)


def _repeated(effect: Effect, resolution: str, result: Any) -> Effect:
    same = effect.resolution == resolution and (
        resolution != Resolution.HAPPENED or vault.reveal(effect, "result") == result
    )
    if not same:
        raise AlreadyResolved(effect)
    return effect


def _record(effect: Effect, resolution: str, result: Any, user: Any, note: str) -> None:
    # An effect resolved `not_happened` can become unknown again if the retried
    # call crashed too: that is a new question, so a new answer overwrites the old.
    before = {"state": effect.state, "resolution": effect.resolution}
    fields: dict[str, Any] = {
        "state": Effect.State.RESOLVED,
        "resolution": resolution,
        "resolved_by": user,
        "resolved_at": Now(),
        "note": redact_text(note),  # a note is only read: secrets in it are destroyed
    }
    if resolution == Resolution.HAPPENED:
        # Sealed with the arguments: one token holds the effect row's secrets.
        views, fields["secrets"] = store.seal_fields(
            args=vault.reveal(effect, "args"), result=result
        )
        fields["result"] = json.loads(views["result"] or "null")
    Effect.objects.filter(pk=effect.pk, state=Effect.State.UNKNOWN).update(**fields)
    after = {"state": Effect.State.RESOLVED, "resolution": resolution, "note": note}
    if resolution == Resolution.HAPPENED:
        after["result"] = result
    audit.record(user, "effect.resolve", effect, before=before, after=after)


def _continue_run(effect: Effect, resolution: str, user: Any) -> None:
    run = Run.objects.get(pk=effect.run_id)
    if resolution == Resolution.ABORTED:
        runs.cancel(run, user=user)
        return
    _wake_if_settled(run.pk)


def _wake_if_settled(run_id: str) -> bool:
    """escalated -> queued once no effect of the run is unknown, and ring.

    The run row is locked after the effect was recorded: an executor that is marking
    the run escalated (store.release_escalated) either commits first, and this sees
    `escalated`, or waits and then sees the resolution. Conditional: a run someone
    cancelled meanwhile stays cancelled (resume it to go on)."""
    # Locked and touched: a live run page sees the resolution even while other
    # escalations of the run keep it escalated (web/live.py reads updated_at).
    Run.objects.select_for_update().filter(pk=run_id).update(updated_at=Now())
    if Effect.objects.filter(run_id=run_id, state=Effect.State.UNKNOWN).exists():
        return False
    woken = Run.objects.filter(pk=run_id, status=Run.Status.ESCALATED).update(
        status=Run.Status.QUEUED, rang_at=Now(), updated_at=Now(), **store.escalation_ended(run_id)
    )
    if woken:
        doorbell.ring(run_id)
    return bool(woken)
