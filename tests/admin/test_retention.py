"""Retention policies: what each action does to a mix of runs, and that previews
match what the sweep then does."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from durableruns.models import AuditEvent, Effect, RetentionPolicy, RetentionSweep, Run, Step
from durableruns.services import retention
from tests.admin.factories import make_run, mixed_runs

pytestmark = pytest.mark.django_db

ALL_TERMINAL = ["succeeded", "failed", "cancelled"]
UNTOUCHABLE = {"running", "waiting", "awaiting", "escalated", "cancelled-unknown", "held"}


def _policy(action: str, **fields) -> RetentionPolicy:
    defaults = {
        "name": f"{action}-old",
        "agent": "refund-bot",
        "statuses": ALL_TERMINAL,
        "age_days": 30,
        "action": action,
    }
    return RetentionPolicy.objects.create(**{**defaults, **fields})


def test_it_deletes_only_old_terminal_unprotected_runs_of_the_agent():
    mixed_runs()
    AuditEvent.objects.create(
        actor_name="bob", action="run.cancel", target_type="run", target_id="cancelled"
    )
    sweep = retention.apply(_policy("delete"))

    remaining = set(Run.objects.values_list("id", flat=True))
    assert remaining == UNTOUCHABLE | {"recent", "other-agent"}
    assert sweep.runs_affected == 3
    assert not Step.objects.filter(run_id="succeeded").exists()
    assert not Effect.objects.filter(run_id__in=["succeeded", "failed"]).exists()
    # The audit trail outlives the run.
    assert AuditEvent.objects.filter(target_id="cancelled").exists()


def test_it_redacts_payloads_but_keeps_keys_states_and_decisions():
    mixed_runs()
    retention.apply(_policy("redact"))

    run = Run.objects.get(pk="succeeded")
    assert run.status == Run.Status.SUCCEEDED and run.redacted_at is not None
    assert run.input == retention.REDACTED_PAYLOAD
    assert run.result == retention.REDACTED_PAYLOAD
    assert run.error is None  # nothing was recorded, nothing to redact
    step = run.steps.get()
    assert (step.kind, step.name, step.position) == ("llm", "plan", 0)
    assert step.input == step.result == retention.REDACTED_PAYLOAD
    effect = run.effects.get()
    assert effect.idempotency_key == "succeeded:1-refund:refund:ab"
    assert effect.state == Effect.State.SUCCEEDED
    assert effect.args == effect.result == retention.REDACTED_PAYLOAD


def test_it_never_touches_unfinished_escalated_or_held_runs():
    runs = mixed_runs()
    for action in ("delete", "redact"):
        retention.apply(
            _policy(
                action, name=f"everything-{action}", agent="", statuses=ALL_TERMINAL, age_days=0
            )
        )
    for run_id in UNTOUCHABLE:
        run = Run.objects.get(pk=run_id)
        assert run.input == runs[run_id].input, run_id
        assert run.redacted_at is None
        assert run.steps.get().result == {"content": "a plan"}


def test_it_scopes_by_status():
    mixed_runs()
    sweep = retention.apply(_policy("delete", statuses=["failed"]))
    assert sweep.runs_affected == 1
    assert not Run.objects.filter(pk="failed").exists()
    assert Run.objects.filter(pk__in=["succeeded", "cancelled"]).count() == 2


def test_its_preview_matches_what_the_sweep_does():
    mixed_runs()
    delete = _policy("delete", statuses=["failed", "cancelled"])
    redact = _policy("redact", agent="", age_days=10)
    expected = retention.preview([delete, redact])
    # failed + cancelled deleted; succeeded, other-agent redacted (recent is too new).
    assert (expected.delete, expected.redact) == (2, 2)
    assert str(expected) == "would delete 2 runs, redact 2"

    sweeps = retention.apply_all()
    done = {s.action: s.runs_affected for s in sweeps}
    assert done == {"delete": expected.delete, "redact": expected.redact}
    assert retention.preview([delete, redact]) == retention.Preview(0, 0)


def test_it_applies_in_batches_and_logs_each_sweep():
    mixed_runs()
    sweep = retention.apply(_policy("redact", agent=""), batch_size=2, triggered_by="test")
    assert (sweep.runs_affected, sweep.batches) == (4, 2)
    logged = RetentionSweep.objects.get()
    assert (logged.policy_name, logged.action, logged.triggered_by) == (
        "redact-old",
        "redact",
        "test",
    )
    assert logged.duration_ms > 0


def test_its_dry_run_command_changes_nothing(capsys):
    mixed_runs()
    _policy("delete")
    call_command("apply_retention", "--dry-run")
    out = capsys.readouterr().out
    assert "would delete 3 runs, redact 0" in out
    assert "delete-old: would delete 3 runs" in out
    assert Run.objects.count() == 11
    assert RetentionSweep.objects.get().dry_run


def test_its_command_applies_the_enabled_policies(capsys):
    mixed_runs()
    _policy("delete")
    _policy("redact", name="disabled", agent="", enabled=False)
    call_command("apply_retention")
    assert "delete-old: deleted 3 runs" in capsys.readouterr().out
    assert Run.objects.count() == 8
    assert not Run.objects.filter(redacted_at__isnull=False).exists()


def test_its_beat_task_applies_the_policies():
    from durableruns.tasks import apply_retention

    mixed_runs()
    _policy("delete")
    assert apply_retention() == 3
    assert RetentionSweep.objects.get().triggered_by == "beat"


def test_the_sweep_leader_applies_retention_on_its_schedule(settings, leader_tick):
    from durableruns import tasks

    schedule = {job.__self__.name: interval for interval, job in tasks.periodic_jobs()}
    assert schedule["durableruns.apply_retention"] == settings.DURABLERUNS_RETENTION_INTERVAL
    make_run("old", Run.Status.SUCCEEDED)
    _policy("delete")

    leader_tick()

    assert not Run.objects.filter(pk="old").exists()
    assert RetentionSweep.objects.get().triggered_by == "beat"
