"""Child runs: the engine's side of `run.child(agent, input)` and `run.children([...])`.

A child is a durable run of its own (its own lease, steps, effects, budgets, agent and
checkpoint versions) with a link to its parent: `parent_run` and `parent_position`,
the position of the parent's step of kind `child` that waits for it.

- Its id is derived from the parent's id and that position (`child_id`), never from
  time or randomness, and it is created get-or-create under the parent's lease: a
  replay, a resume after a crash or a zombie executor finds the same child, so no
  child is ever started twice.
- The parent then suspends as `awaiting_child`, holding no lease and no worker
  (invariant 8). When a child's end is committed, its executor (or a cancel) wakes the
  parent at once (`wake_parent`), a doorbell, no polling; the sweeper wakes a parent
  whose wake was lost to a crash between the two (`wake_stranded`).
- Both sides lock the parent's row first (the parent releasing itself, the child
  waking it), and read the children after, in a statement of their own. So whichever
  commits second sees the other: the parent sees the child finished and queues
  itself, or the child sees the parent waiting and wakes it (as in gates.py).
- The child's result is the step's outcome; a failure or a cancel is a permanent step
  error (ChildRunFailed, ChildRunCancelled) whose message the model may read.

Budgets are not inherited: a child has its own agent's max_steps and max_duration,
and its steps do not count against the parent's. Time the parent spends waiting for
children is not the parent's to budget (like approval waits, context.waited_seconds).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.functions import Now

from ..models import Run as RunRecord
from ..models import Step
from . import doorbell, registry, store, vault
from .errors import LeaseLost, NonDeterminismError, UnknownAgent, UsageError
from .keys import fingerprint
from .runs import start_run

log = logging.getLogger(__name__)
Status = RunRecord.Status
MAX_ID = 64  # engine.runs.RUN_ID_PATTERN


def child_id(parent_id: str, position: int) -> str:
    """The child's run id: the parent's id and the step position, shortened with a
    digest of the parent's id when that would not fit (nested children)."""
    tail = f".c{position}"
    if len(parent_id) + len(tail) <= MAX_ID:
        return parent_id + tail
    digest = hashlib.sha256(parent_id.encode()).hexdigest()[:12]
    return f"{parent_id[: MAX_ID - len(tail) - 13]}-{digest}{tail}"


def describe(agent: Any, run_input: Any, version: str | None) -> tuple[str, dict[str, Any]]:
    """(the agent's name, the step's input) for a child request; refuses misuse before
    anything is recorded. `agent` is a registered agent function or its name."""
    definition = getattr(agent, "agent", None)
    name = definition.name if isinstance(definition, registry.Agent) else agent
    if not isinstance(name, str):
        raise UsageError(
            f"run.child() takes an agent (a @dr.agent function or its name), not {agent!r}"
        )
    if not isinstance(run_input, dict):
        raise UsageError(
            f"a child run's input must be a JSON object, not {type(run_input).__name__}"
        )
    try:
        definition = registry.get_agent(name, version)
    except UnknownAgent as exc:
        raise UsageError(f"run.child(): {exc}") from None
    # Here, not when the child starts under the parent's lease: nothing is recorded yet.
    definition.check_input(run_input)
    return name, {"agent": name, "version": version, "input": run_input}


def existing(parent: RunRecord, position: int, wanted: dict[str, Any]) -> RunRecord | None:
    """The child an earlier pass started for the step at `position`, checked against
    what agent code asks for now (invariant 9); None if there is none yet."""
    found = RunRecord.objects.filter(pk=child_id(parent.id, position)).first()
    return None if found is None else _same_child(found, parent, position, wanted)


def start(
    lease: store.Lease, parent: RunRecord, position: int, wanted: dict[str, Any]
) -> RunRecord:
    """Get or create the child for the parent's step at `position`, under the parent's
    lease (the child's doorbell rings on commit)."""
    run_id = child_id(parent.id, position)
    with transaction.atomic():
        _lock_held(lease)
        found = existing(parent, position, wanted)
        if found is not None:
            return found
        child, _ = start_run(
            wanted["agent"],
            wanted["input"],
            run_id=run_id,
            user=parent.created_by,
            version=wanted["version"],
            links={
                "parent_run_id": parent.id,
                "parent_position": position,
                # A sandboxed run's children must not call write tools either.
                "sandbox": bool(getattr(parent, "sandbox", False)),
            },
        )
    log.info("run %s: step %s started child run %s", parent.id, position, child.id)
    return child


def _lock_held(lease: store.Lease) -> None:
    held = RunRecord.objects.select_for_update().filter(
        pk=lease.run_id, fence=lease.fence, lease_owner=lease.owner
    )
    if not list(held.values_list("pk", flat=True)):
        lease.lost = True
        raise LeaseLost(f"run {lease.run_id}: fence {lease.fence} is stale")


def _same_child(
    existing: RunRecord, parent: RunRecord, position: int, wanted: dict[str, Any]
) -> RunRecord:
    same = (
        existing.parent_run_id == parent.id
        and existing.parent_position == position
        and existing.agent == wanted["agent"]
        and wanted["version"] in (None, existing.agent_version)
        and fingerprint(vault.reveal(existing, "input")) == fingerprint(wanted["input"])
    )
    if not same:
        raise NonDeterminismError(
            f"non-determinism at step {position}: child run {existing.id} is "
            f"{existing.agent}@{existing.agent_version} with other input, agent code asked "
            f"for a child run of {wanted['agent']!r} with this input",
            details={"position": position, "child": existing.id},
        )
    return existing


def outcome(child: RunRecord) -> tuple[Any, dict[str, Any] | None]:
    """(result, error) of the parent's step for a child that has finished."""
    if child.status == Status.SUCCEEDED:
        return store.normalise(vault.reveal(child, "result")), None
    if child.status == Status.CANCELLED:
        message = f"child run {child.id} ({child.agent}) was cancelled before it finished"
        return None, {"type": "ChildRunCancelled", "message": message, "child": child.id}
    why = (child.error or {}).get("message", "") if isinstance(child.error, dict) else ""
    message = f"child run {child.id} ({child.agent}) failed: {why or child.status}"
    return None, {"type": "ChildRunFailed", "message": message, "child": child.id}


def _unfinished(parent: Any) -> QuerySet[RunRecord]:
    """The parent's children it still waits for: not finished, and the parent's step
    for them not recorded (a failed child an operator resumed later is not awaited)."""
    recorded = Step.objects.filter(
        run_id=OuterRef("parent_run_id"), position=OuterRef("parent_position")
    )
    return (
        RunRecord.objects.filter(parent_run_id=parent)
        .exclude(status__in=RunRecord.TERMINAL)
        .exclude(Exists(recorded))
    )


def release_awaiting(lease: store.Lease, **fields: Any) -> str | None:
    """Release the parent to `awaiting_child`, or to `queued` when its children have
    all finished meanwhile. Returns the status left, or None when the lease was lost."""
    with transaction.atomic():
        try:
            _lock_held(lease)
        except LeaseLost:
            log.warning("run %s: lease lost before waiting for its children", lease.run_id)
            return None
        if _unfinished(lease.run_id).exists():
            store.release(lease, Status.AWAITING_CHILD, **fields)
            return Status.AWAITING_CHILD
        store.release(lease, Status.QUEUED, rang_at=Now(), **fields)
        doorbell.ring(lease.run_id)
        return Status.QUEUED


def wake_parent(parent_id: str | None) -> bool:
    """After a child's end is committed: queue its parent if it waits and nothing else
    it waits for is unfinished, and ring it (after commit)."""
    if parent_id is None:
        return False
    with transaction.atomic():
        # Lock by id alone: a filter on the status would skip a row a releasing
        # parent holds, instead of waiting for its commit.
        locked = RunRecord.objects.select_for_update().filter(pk=parent_id)
        status = locked.values_list("status", flat=True).first()
        if status != Status.AWAITING_CHILD or _unfinished(parent_id).exists():
            return False
        RunRecord.objects.filter(pk=parent_id).update(
            status=Status.QUEUED, rang_at=Now(), updated_at=Now()
        )
        doorbell.ring(parent_id)
    return True


def parent_of(run_id: str) -> tuple[str | None, int | None]:
    """(parent run id, parent step position) of a run; (None, None) if it has none."""
    found = RunRecord.objects.filter(pk=run_id).values_list("parent_run_id", "parent_position")
    return found.first() or (None, None)


def wake_stranded(batch: int = 500) -> int:
    """The sweeper's part: wake every parent left `awaiting_child` with no unfinished
    child (its wake was lost to a crash after the child's end); returns how many."""
    stranded = (
        RunRecord.objects.filter(status=Status.AWAITING_CHILD)
        .exclude(Exists(_unfinished(OuterRef("pk"))))
        .order_by()
        .values_list("pk", flat=True)[:batch]
    )
    woken = [parent_id for parent_id in list(stranded) if wake_parent(parent_id)]
    if woken:
        log.info("sweeper: woke %d parent run(s) whose children had finished", len(woken))
    return len(woken)
