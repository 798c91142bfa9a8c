"""The engine in one process: checkpoints, replay, retries, budgets, divergence, versions."""

from __future__ import annotations

import pytest

import durableruns as dr
import durableruns.engine.keys
from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine import executor, registry, store
from durableruns.engine.runs import RunConflict, start_run
from durableruns.models import Effect, Run, Step
from tests.engine.agents import CALLS

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_runs_the_refund_agent_with_one_execution_per_effect(drive, provider_url):
    run, _ = start_run("refund-bot", {"order_id": "A-1001"}, run_id="r1")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result["refunded"] is True
    assert list(run.steps.order_by("position").values_list("name", flat=True)) == [
        "plan",
        "lookup_order",
        "refund",
        "send_email",
        "summary",
    ]
    executed = ProviderCall.objects.filter(outcome=ProviderCall.Outcome.EXECUTED)
    assert sorted(executed.values_list("provider", flat=True)) == ["email", "payments"]
    assert ModelCall.objects.count() == 2


def test_it_stores_the_idempotency_key_derived_from_run_step_tool_and_args(drive, provider_url):
    run, _ = start_run("refund-bot", {"order_id": "A-1001"}, run_id="keyed")
    drive(run.id)
    effect = Effect.objects.get(run_id="keyed", tool="refund")
    args = {"order_id": "A-1001", "cents": 4500, "fail_first": 0}
    assert effect.idempotency_key == f"keyed:2-refund:refund:{dr.engine.keys.fingerprint(args)}"
    assert ProviderCall.objects.get(provider="payments").idempotency_key == effect.idempotency_key


def test_it_replays_completed_steps_without_executing_them_again(drive):
    run, _ = start_run("t-sleepy", {"seconds": 0.2}, run_id="s1")
    executor.advance(run.id)
    assert Run.objects.get(pk="s1").status == Run.Status.WAITING
    assert CALLS == {"first": 1}
    run = drive("s1")
    assert run.status == Run.Status.SUCCEEDED
    assert CALLS == {"first": 1, "second": 1}
    assert run.result == {"first": "first", "second": "second"}


def test_a_durable_sleep_holds_no_lease_and_is_not_taken_before_it_is_due(rung):
    start_run("t-sleepy", {"seconds": 30}, run_id="s2")
    executor.advance("s2")
    run = Run.objects.get(pk="s2")
    assert (run.status, run.lease_owner, run.lease_expires_at) == (Run.Status.WAITING, "", None)
    assert executor.advance("s2") == "skipped"


def test_it_retries_transient_failures_with_backoff_and_then_succeeds(drive):
    start_run("t-flaky", {"failures": 2}, run_id="f1")
    executor.advance("f1")
    waiting = Run.objects.get(pk="f1")
    assert waiting.status == Run.Status.WAITING
    assert waiting.wake_at is not None and waiting.retry_attempts == 1
    assert waiting.last_error["type"] == "TransientError"
    assert len(waiting.retry_attempt_times) == 1
    run = drive("f1")
    assert run.status == Run.Status.SUCCEEDED
    step = Step.objects.get(run=run)
    assert step.attempts == 3
    assert CALLS["flaky"] == 3
    _assert_timed_attempts(step, failed=2)
    assert run.retry_attempt_times is None  # cleared with the retry counter


def _assert_timed_attempts(step: Step, *, failed: int) -> None:
    """Each failed attempt has its own [start, end, error], in order, before the last."""
    from datetime import datetime

    times = [[datetime.fromisoformat(t) for t in item[:2]] for item in step.attempt_times]
    assert len(times) == failed
    errors = [item[2] for item in step.attempt_times]
    assert errors == [f"TransientError: flaky failed ({n})" for n in range(1, failed + 1)]
    ends = [step.started_at]
    for (started, finished), (next_start, *_) in zip(times, [*times[1:], ends], strict=True):
        assert started <= finished <= next_start


def test_it_bounds_transient_retries_and_fails_with_the_last_error(drive, settings):
    settings.DURABLERUNS_RETRY_MAX_ATTEMPTS = 3
    start_run("t-flaky", {"failures": 10}, run_id="f2")
    run = drive("f2")
    assert run.status == Run.Status.FAILED
    assert CALLS["flaky"] == 3
    _assert_timed_attempts(Step.objects.get(run=run), failed=2)
    assert run.error["type"] == "RetriesExhausted"
    assert "gave up after 3 attempts" in run.error["message"]


def test_it_retries_a_provider_503_with_the_same_key_until_it_succeeds(drive, provider_url):
    start_run("refund-bot", {"order_id": "A-1001", "fail_first": 2}, run_id="p503")
    run = drive("p503")
    assert run.status == Run.Status.SUCCEEDED, run.error
    calls = ProviderCall.objects.filter(provider="payments")
    assert sorted(calls.values_list("outcome", flat=True)) == ["executed", "rejected", "rejected"]
    assert calls.values("idempotency_key").distinct().count() == 1
    assert Effect.objects.get(run=run, tool="refund").attempts == 3


def test_a_permanent_error_fails_the_run_with_the_error_shown(drive):
    start_run("t-permanent", {}, run_id="perm")
    run = drive("perm")
    assert run.status == Run.Status.FAILED
    assert "the card was declined" in run.error["message"]
    assert Step.objects.get(run=run).error["type"] == "PermanentError"


def test_a_model_recoverable_error_is_returned_to_agent_code(drive):
    start_run("t-recoverable", {}, run_id="rec")
    run = drive("rec")
    assert run.status == Run.Status.SUCCEEDED
    assert "must be positive" in run.result["told_model"]


def test_it_stops_a_run_over_its_step_budget(drive):
    start_run("t-looping", {}, run_id="loop")
    run = drive("loop")
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "budget_exceeded"
    assert "step budget exhausted" in run.error["message"]
    assert run.steps.count() == 5


def test_it_stops_a_run_over_its_time_budget(drive):
    start_run("t-slow", {}, run_id="slow")
    run = drive("slow")
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "budget_exceeded"
    assert "time budget exhausted" in run.error["message"]
    assert run.steps.count() < 50


def test_changed_agent_code_stops_the_run_with_a_non_determinism_error(drive):
    start_run("t-sleepy", {"seconds": 1.0}, run_id="div")
    executor.advance("div")
    assert Run.objects.get(pk="div").status == Run.Status.WAITING
    steps_before = list(Step.objects.filter(run_id="div").values_list("id", flat=True))
    original = registry.get_agent("t-sleepy", "1").fn

    def changed(run, task):
        run.step("something-else", lambda: 1)

    registry.get_agent("t-sleepy", "1").fn = changed
    try:
        drive("div")  # waits out the sleep, then replays against the changed code
    finally:
        registry.get_agent("t-sleepy", "1").fn = original
    run = Run.objects.get(pk="div")
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "non_determinism"
    assert "history has compute step 'first'" in run.error["message"]
    assert "asked for compute step 'something-else'" in run.error["message"]
    assert list(Step.objects.filter(run_id="div").values_list("id", flat=True)) == steps_before


def test_a_run_whose_version_this_worker_lacks_waits_for_one_that_has_it(drive, settings):
    settings.DURABLERUNS_HANDBACK_DELAY = 0.2
    start_run("t-flaky", {"failures": 0}, run_id="ver")
    definition = registry.get_agent("t-flaky", "1")
    registry.unregister_agent("t-flaky", "1")
    dr.agent("t-flaky", version="2")(definition.fn)
    try:
        executor.advance("ver")
    finally:
        registry.unregister_agent("t-flaky", "2")
        dr.agent("t-flaky", version="1")(definition.fn)
    run = Run.objects.get(pk="ver")
    assert (run.status, run.error, run.lease_owner) == (Run.Status.WAITING, None, "")
    assert run.wake_at is not None
    assert "waiting for a worker that has agent 't-flaky' version '1'" in run.last_error["message"]

    # A worker that has version 1 (here: this process again) runs it once it is due.
    assert drive("ver").status == Run.Status.SUCCEEDED


def test_an_old_checkpoint_schema_is_migrated_on_read(drive):
    start_run("t-sleepy", {"seconds": 0.5}, run_id="old")
    executor.advance("old")
    assert Run.objects.get(pk="old").status == Run.Status.WAITING
    Step.objects.filter(run_id="old").update(schema_version=0)
    run = drive("old")
    assert run.status == Run.Status.SUCCEEDED


def test_a_stale_fence_cannot_commit_a_step(rung):
    start_run("t-sleepy", {}, run_id="fenced")
    lease = store.acquire_lease("fenced", "worker-a")
    Run.objects.filter(pk="fenced").update(fence=lease.fence + 1)  # someone took over
    outcome = store.StepOutcome(
        0,
        "0-x",
        "compute",
        "x",
        "",
        "",
        None,
        1,
        None,
        1,
        *(2 * [__import__("django.utils.timezone").utils.timezone.now()]),
    )
    with pytest.raises(dr.engine.errors.LeaseLost):
        store.commit_step(lease, outcome)
    assert not Step.objects.filter(run_id="fenced").exists()


def test_only_one_executor_gets_the_lease(rung):
    start_run("t-sleepy", {}, run_id="leased")
    first = store.acquire_lease("leased", "worker-a")
    assert first is not None
    assert store.acquire_lease("leased", "worker-b") is None


def test_starting_is_idempotent_on_the_run_id(rung):
    first, created = start_run("t-sleepy", {"seconds": 1}, run_id="same")
    again, created_again = start_run("t-sleepy", {"seconds": 1}, run_id="same")
    assert (created, created_again, again.pk) == (True, False, first.pk)
    assert Run.objects.count() == 1
    with pytest.raises(RunConflict):
        start_run("t-sleepy", {"seconds": 2}, run_id="same")


def test_secrets_in_the_input_are_redacted_before_they_are_stored(rung):
    run, _ = start_run(
        "t-sleepy",
        {"seconds": 1, "api_key": "sk-live-abc", "note": "Authorization: Bearer abcdefghijklmnop"},
        run_id="sec",
    )
    stored = Run.objects.get(pk=run.pk).input
    assert stored["api_key"] == "[REDACTED]"
    assert "abcdefghijklmnop" not in stored["note"]
