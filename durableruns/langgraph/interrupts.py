"""LangGraph interrupts as durableruns approvals, and decisions as resume values.

The convention (README, "LangGraph"): when the value given to `interrupt()` is a
dict, these keys shape the approval; anything else is shown as the payload.

    interrupt({
        "summary": "Refund 12 000 cents on order A-1?",   # the inbox line
        "payload": {"order": "A-1", "cents": 12000},       # what the reviewer sees/edits
        "allowed": ["approve", "edit", "reject"],          # default: approve, reject
        "schema": {...},                                   # JSON schema an edit must fit
        "four_eyes": True,                                 # the starter may not approve
        "expires_in": 3600, "on_expiry": "reject",         # seconds; default decision
    })

`interrupt()` returns what LangGraph's own docs promise a resume value is:

    approve  -> True, or the payload as approved when the interrupt allows "edit"
                (so both `if is_approved:` and `value = interrupt(...)` read right)
    edit     -> the reviewer's edited payload
    reject   -> False
    respond  -> the reviewer's answer (text), when the interrupt allows "respond"
    ignore   -> None (dismissed, nothing approved), when the interrupt allows "ignore"
    expire   -> as its on_expiry decision (approve or reject)

An interrupt whose value has `"returns": "decision"` gets the whole decision instead:
    {"decision": "approve" | "edit" | "reject" | "respond" | "ignore" | "expire", "approved": bool,
     "payload": <the payload, or the reviewer's edit>, "comment": "..."}
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from durableruns.engine import signals
from durableruns.engine import store as engine_store
from durableruns.engine.gates import KNOWN_DECISIONS, outcome_of
from durableruns.langgraph.render import node_of, value
from durableruns.langgraph.serde import printable
from durableruns.models import Approval

log = logging.getLogger(__name__)


def approval_specs(interrupts: Any, serde: Any, task_path: str) -> list[dict[str, Any]]:
    """Approval fields for each Interrupt LangGraph records (values decoded safely)."""
    specs = []
    for item in interrupts if isinstance(interrupts, (list, tuple)) else [interrupts]:
        interrupt_id = str(getattr(item, "id", "") or "")
        if not interrupt_id:
            continue
        shown = value(*serde.dumps_typed(getattr(item, "value", None)))
        specs.append({"interrupt_id": interrupt_id[:200], **_shape(shown, node_of(task_path))})
    return specs


def _shape(shown: Any, node: str) -> dict[str, Any]:
    spec = shown if isinstance(shown, dict) else {}
    allowed = [d for d in spec.get("allowed") or [] if d in KNOWN_DECISIONS] or [
        "approve",
        "reject",
    ]
    schema = spec.get("schema") if isinstance(spec.get("schema"), dict) else None
    expires_in = spec.get("expires_in")
    on_expiry = spec.get("on_expiry") if spec.get("on_expiry") in ("approve", "reject") else None
    return {
        "name": printable(node or "interrupt", 100)[:100],
        "summary": printable(str(spec.get("summary") or f"{node or 'graph'} is waiting"), 500),
        "payload": _stored(spec.get("payload", shown)),
        "allowed": allowed,
        "schema": schema,
        "four_eyes": spec.get("four_eyes") is True,
        "expires_in": expires_in if isinstance(expires_in, (int, float)) else None,
        "on_expiry": on_expiry or "reject",
    }


def _stored(payload: Any) -> Any:
    """As native approval payloads are stored: redacted, normalised, size-bounded."""
    try:
        engine_store.encode(payload)
    except Exception:
        return {"note": "the interrupt value is too large to show"}
    return engine_store.normalise(engine_store.redact(payload))


def open_approvals(run_id: str, specs: list[dict[str, Any]]) -> None:
    """Create the approvals (once per interrupt id) inside the caller's transaction."""
    if not specs:
        return
    # The caller holds the Run row (store.touch), so this check-then-insert is not racy.
    known = set(
        Approval.objects.filter(
            run_id=run_id, interrupt_id__in=[s["interrupt_id"] for s in specs]
        ).values_list("interrupt_id", flat=True)
    )
    last = Approval.objects.filter(run_id=run_id).aggregate(m=Max("position"))["m"]
    position = -1 if last is None else last
    fresh = []
    for spec in specs:
        if spec["interrupt_id"] in known:
            continue
        known.add(spec["interrupt_id"])
        spec = dict(spec)
        expires_in = spec.pop("expires_in")
        position += 1
        fresh.append(
            Approval(
                run_id=run_id,
                position=position,
                expires_at=timezone.now() + timedelta(seconds=expires_in) if expires_in else None,
                **spec,
            )
        )
    if fresh:
        Approval.objects.bulk_create(fresh)
        ids = [a.interrupt_id for a in fresh]
        transaction.on_commit(lambda: _notify(run_id, ids))


def _notify(run_id: str, interrupt_ids: list[str]) -> None:
    # Mail trouble never stops a graph: the inbox shows the approval anyway.
    for approval in Approval.objects.filter(run_id=run_id, interrupt_id__in=interrupt_ids):
        for receiver, reply in signals.approval_opened.send_robust(
            sender=Approval, approval=approval
        ):
            if isinstance(reply, Exception):
                log.warning("approval %s: %s failed", approval.pk, receiver, exc_info=reply)


def resume_value(approval: Approval, asked: Any = None) -> Any:
    """What `interrupt()` returns in the graph for a decided approval; `asked` is the
    value the graph gave `interrupt()` (its "returns" key opts out: module docstring)."""
    outcome = outcome_of(approval)
    if isinstance(asked, dict) and asked.get("returns") == "decision":
        return {k: outcome[k] for k in ("decision", "approved", "payload", "comment")}
    if outcome["decision"] == "respond":
        return outcome["comment"]
    if outcome["decision"] == "ignore":
        return None
    if not outcome["approved"]:
        return False
    if "edit" in approval.allowed:
        return outcome["payload"]
    return True
