"""What the API reads and writes. Responses are model rows; requests are small forms."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .. import roles
from ..engine.runs import RUN_ID_PATTERN
from ..models import Approval, AuditEvent, Effect, Run, Step
from ..services.approvals import DECISIONS


class _ErrorsForRole(serializers.ModelSerializer):
    """Tracebacks in recorded errors only for operators and admins (roles.error_for);
    without a request in the context, for nobody."""

    error_fields: tuple[str, ...] = ("error",)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        request = self.context.get("request")
        user = getattr(request, "user", None)
        for name in self.error_fields:
            if name in data:
                data[name] = roles.error_for(user, data[name])
        return data


class _RunList(serializers.ListSerializer):
    def to_representation(self, data: Any) -> list[Any]:
        runs = list(data.all() if hasattr(data, "all") else data)
        Run.fill_langgraph_activity(runs)  # one query for the page's threads
        return super().to_representation(runs)


class RunSerializer(_ErrorsForRole):
    """A langgraph thread's steps_used and updated_at come from its checkpoints."""

    error_fields = ("error", "last_error")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        Run.fill_langgraph_activity([instance])
        return super().to_representation(instance)

    parent = serializers.CharField(
        source="parent_id",
        allow_null=True,
        read_only=True,
        help_text="the run this one was forked from",
    )
    parent_run = serializers.CharField(
        source="parent_run_id",
        allow_null=True,
        read_only=True,
        help_text="for a child run (run.child): the run that started it and waits for it",
    )
    created_by = serializers.CharField(
        source="created_by.username", allow_null=True, default=None, read_only=True
    )

    class Meta:
        model = Run
        fields = (
            "id",
            "agent",
            "agent_version",
            "input",
            "status",
            "result",
            "error",
            "last_error",
            "max_steps",
            "max_duration_seconds",
            "steps_used",
            "parent",
            "fork_position",
            "parent_run",
            "parent_position",
            "sandbox",
            "tokens_in",
            "tokens_out",
            "tokens_cached",
            "cost",
            "max_tokens",
            "max_cost",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "updated_at",
            "wake_at",
        )
        read_only_fields = fields
        list_serializer_class = _RunList


class StepSerializer(_ErrorsForRole):
    class Meta:
        model = Step
        fields = (
            "position",
            "step_id",
            "kind",
            "name",
            "tool",
            "fingerprint",
            "input",
            "result",
            "error",
            "attempts",
            "started_at",
            "finished_at",
            "schema_version",
        )
        read_only_fields = fields


class EffectSerializer(_ErrorsForRole):
    run = serializers.CharField(source="run_id", read_only=True)
    resolved_by = serializers.CharField(
        source="resolved_by.username", allow_null=True, default=None, read_only=True
    )
    resolution = serializers.ChoiceField(
        Effect.Resolution.choices,
        allow_blank=True,
        read_only=True,
        help_text="blank until resolved",
    )

    class Meta:
        model = Effect
        fields = (
            "id",
            "run",
            "position",
            "idempotency_key",
            "tool",
            "tool_kind",
            "fingerprint",
            "args",
            "state",
            "result",
            "error",
            "attempts",
            "started_at",
            "finished_at",
            "resolution",
            "resolved_by",
            "resolved_at",
            "note",
        )
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = AuditEvent
        fields = ("id", "actor", "action", "target_type", "target_id", "before", "after")
        fields += ("created_at",)
        read_only_fields = fields


class ApprovalSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run_id", read_only=True)
    decision = serializers.ChoiceField(
        Approval.Decision.choices, allow_blank=True, read_only=True, help_text="blank while pending"
    )
    decided_by = serializers.CharField(
        source="decider_name", read_only=True, help_text="blank while pending"
    )

    class Meta:
        model = Approval
        fields = (
            "id",
            "run",
            "position",
            "name",
            "summary",
            "payload",
            "allowed",
            "schema",
            "guards",
            "four_eyes",
            "state",
            "decision",
            "decided_by",
            "comment",
            "edited_payload",
            "expires_at",
            "on_expiry",
            "created_at",
            "decided_at",
        )
        read_only_fields = fields


def page_of(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """A cursor page (next/previous links and results), named for the OpenAPI schema."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item(many=True),
        },
    )


RunPage = page_of(RunSerializer, "RunPage")
StepPage = page_of(StepSerializer, "StepPage")
EffectPage = page_of(EffectSerializer, "EffectPage")
ApprovalPage = page_of(ApprovalSerializer, "ApprovalPage")


class StartRunSerializer(serializers.Serializer):
    agent = serializers.CharField(max_length=100)
    input = serializers.DictField(default=dict, help_text="the run input, a JSON object")
    run_id = serializers.CharField(
        max_length=64,
        required=False,
        help_text="a client-chosen id; starting again with it returns the same run",
    )
    agent_version = serializers.CharField(
        max_length=100, required=False, help_text="default: the newest registered version"
    )

    def validate_run_id(self, value: str) -> str:
        if not RUN_ID_PATTERN.match(value):
            raise serializers.ValidationError("1-64 letters, digits, '.', '_' or '-'")
        return value


# Steps are numbered in a Postgres integer column.
MAX_POSITION = 2**31 - 1


class ForkSerializer(serializers.Serializer):
    position = serializers.IntegerField(
        min_value=0,
        max_value=MAX_POSITION,
        required=False,
        help_text="reuse steps before it, execute from it (required for a native run)",
    )
    checkpoint_id = serializers.CharField(
        required=False,
        max_length=200,
        help_text="a LangGraph thread's root checkpoint to fork from (required for a "
        "thread, which takes nothing else: no edits, no reused decisions; an interrupt "
        "there is asked of a reviewer again)",
    )
    sandbox = serializers.BooleanField(
        default=False, help_text="record write-tool calls without making them"
    )
    reuse_approvals = serializers.BooleanField(
        default=False,
        help_text="reuse the copied approvals that guard re-executed effects instead of "
        "asking a reviewer again (needs the permission to approve; audited)",
    )
    input = serializers.JSONField(
        required=False,
        help_text="an edited input (a JSON object) replacing the parent's; absent: the "
        "parent's input (audited, redacted and size-checked like a new run's)",
    )
    output = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text="an edited recorded output of the last reused step (position - 1); "
        "absent: the recorded one is kept, null: the step returned null (audited)",
    )


class ForkPreviewQuery(serializers.Serializer):
    position = serializers.IntegerField(min_value=0, max_value=MAX_POSITION)


class DecideSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(DECISIONS)
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)
    payload = serializers.JSONField(
        required=False, default=None, help_text="for `edit`: the payload that replaces it"
    )


class CancelSerializer(serializers.Serializer):
    # Checked by services.runs.person_reason, the dashboard's rule (1-500 characters).
    reason = serializers.CharField(help_text="why (audited); required, as on the dashboard")


class ResolveSerializer(serializers.Serializer):
    resolution = serializers.ChoiceField(Effect.Resolution.choices)
    result = serializers.JSONField(
        required=False, default=None, help_text="for `happened`: what the call returned"
    )
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)


class ReplayEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["replayed", "diverged", "would_execute"])
    kind = serializers.CharField()
    name = serializers.CharField()
    tool = serializers.CharField(allow_blank=True)
    expected = serializers.CharField(allow_blank=True)
    actual = serializers.CharField(allow_blank=True)
    outcome = serializers.CharField(allow_blank=True)
    message = serializers.CharField(allow_blank=True)


class ReplayReportSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    agent = serializers.CharField()
    agent_version = serializers.CharField()
    recorded_steps = serializers.IntegerField()
    ok = serializers.BooleanField()
    ending = serializers.CharField()
    summary = serializers.SerializerMethodField()
    entries = ReplayEntrySerializer(many=True)
    result = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)

    def get_summary(self, report: Any) -> str:
        return report.summary()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
