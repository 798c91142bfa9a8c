"""The exported form of a run: one JSON document, also the scriptable way to inspect it."""

from __future__ import annotations

from typing import Any

from django.forms.models import model_to_dict

from .approvals import audit_trail
from .models import AuditEvent, Run

EXPORT_FORMAT = 1
_RUN_FIELDS = ("id", "agent", "agent_version", "input", "status", "result", "error",
               "max_steps", "max_duration_seconds", "steps_used", "fence", "parent",
               "fork_position", "tokens_in", "tokens_out", "retry_position", "retry_attempts",
               "last_error")
_STEP_FIELDS = ("position", "step_id", "kind", "name", "tool", "fingerprint", "input", "result",
                "error", "attempts", "schema_version")
_APPROVAL_FIELDS = ("position", "name", "summary", "payload", "allowed", "schema", "guards",
                    "four_eyes", "state", "decision", "decider_name", "comment",
                    "edited_payload", "on_expiry")
_EFFECT_FIELDS = ("position", "idempotency_key", "tool", "tool_kind", "fingerprint", "args",
                  "state", "result", "error", "attempts", "resolution", "note")


def _times(obj: Any, *names: str) -> dict[str, str | None]:
    return {n: (getattr(obj, n).isoformat() if getattr(obj, n) else None) for n in names}


def export_run(run: Run) -> dict[str, Any]:
    return {
        "format": EXPORT_FORMAT,
        "run": {**model_to_dict(run, fields=_RUN_FIELDS), "id": run.id,
                **_times(run, "created_at", "started_at", "finished_at")},
        "steps": [
            {**model_to_dict(step, fields=_STEP_FIELDS),
             **_times(step, "started_at", "finished_at")}
            for step in run.steps.order_by("position")
        ],
        "effects": [
            {**model_to_dict(effect, fields=_EFFECT_FIELDS),
             **_times(effect, "started_at", "finished_at", "resolved_at")}
            for effect in run.effects.order_by("position")
        ],
        "approvals": [
            {**model_to_dict(approval, fields=_APPROVAL_FIELDS),
             **_times(approval, "created_at", "decided_at", "expires_at")}
            for approval in run.approvals.order_by("position")
        ],
        "audit": [_audit_event(event) for event in audit_trail(run)],
    }


def _audit_event(event: AuditEvent) -> dict[str, Any]:
    return {"actor": event.actor_name, "action": event.action, "target_type": event.target_type,
            "target_id": event.target_id, "before": event.before, "after": event.after,
            **_times(event, "created_at")}
