"""How crashtest plans its matrix and judges a crashed run, without processes."""

from __future__ import annotations

import io
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace
from unittest import mock

import pytest
from django.utils import timezone

from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine import crashpoints
from durableruns.models import Effect, Run, Step
from durableruns.testing import crashtest
from durableruns.testing.crashtest.judge import judge
from durableruns.testing.crashtest.plan import Case
from durableruns.testing.crashtest.runner import Scheduler

pytestmark = pytest.mark.django_db


def _refund_run(run_id: str, refund_id: str, *, summary: str | None = None) -> Run:
    """A finished refund-bot run as the engine records it: steps, one effect, a result."""
    run = Run.objects.create(
        id=run_id,
        agent="refund-bot",
        agent_version="1",
        input={},
        status="succeeded",
        max_steps=20,
        max_duration_seconds=60,
        result={
            "refund_id": refund_id,
            "summary": summary or f"Refunded ({refund_id}).",
            "run": run_id,
        },
    )
    now = timezone.now()
    for position, (kind, name) in enumerate(
        [("llm", "plan"), ("tool", "lookup_order"), ("tool", "refund"), ("llm", "summary")]
    ):
        Step.objects.create(
            run=run,
            position=position,
            step_id=f"{position}-{name}",
            kind=kind,
            name=name,
            started_at=now,
            finished_at=now,
        )
    Effect.objects.create(
        run=run,
        position=2,
        idempotency_key=f"{run_id}:2-refund:refund:00ff",
        tool="refund",
        tool_kind="idempotent_write",
        fingerprint="00ff",
        args={},
        state="succeeded",
        result={"refund_id": refund_id, "status": "succeeded"},
        started_at=now,
    )
    return run


def test_it_plans_every_point_at_every_step_it_applies_to():
    cases = crashtest.plan_cases(_refund_run("base", "re_1"), "s1")
    planned = {(case.point, case.position) for case in cases}
    assert (crashpoints.BEFORE_STEP, 0) in planned
    assert (crashpoints.AFTER_STEP_COMMIT, 3) in planned
    assert {p for p, pos in planned if pos == 2} == set(crashpoints.ALL) - {
        crashpoints.AFTER_RUN_FINISHED,
        *crashpoints.FAN_OUT_ONLY,
    }
    assert not {(p, pos) for p, pos in planned if p in crashpoints.EFFECT_ONLY and pos != 2}
    assert (crashpoints.AFTER_RUN_FINISHED, -1) in planned
    assert len(cases) == 4 + 4 + 3 + 1


def test_it_compares_results_without_run_specific_ids():
    baseline = _refund_run("base", "re_aaaaaaaa")
    crashed = _refund_run("crashed-7", "re_bbbbbbbb")
    assert crashtest.comparable(crashed) == crashtest.comparable(baseline)


def test_it_sees_a_result_that_really_differs():
    baseline = _refund_run("base", "re_aaaaaaaa")
    crashed = _refund_run("crashed-7", "re_bbbbbbbb", summary="Refunded twice.")
    assert crashtest.comparable(crashed) != crashtest.comparable(baseline)


def test_it_sees_a_run_that_failed_where_the_baseline_succeeded():
    baseline = _refund_run("base", "re_aaaaaaaa")
    crashed = _refund_run("crashed-7", "re_bbbbbbbb")
    Run.objects.filter(pk=crashed.pk).update(status="failed", error={"type": "PermanentError"})
    crashed.refresh_from_db()
    assert crashtest.comparable(crashed) != crashtest.comparable(baseline)


def test_it_counts_executions_per_step_and_tool_whatever_the_arguments():
    for fingerprint in ("aaaa", "bbbb"):  # arguments embedding run-specific ids
        ProviderCall.objects.create(
            provider="email",
            mode="none",
            payload={},
            idempotency_key=f"r1:3-send_email:send_email:{fingerprint}",
        )
    ProviderCall.objects.create(
        provider="payments",
        mode="none",
        payload={},
        outcome="rejected",
        idempotency_key="r1:2-refund:refund:cccc",
    )
    ProviderCall.objects.create(
        provider="payments", mode="none", payload={}, idempotency_key="r10:2-refund:refund:cccc"
    )
    ModelCall.objects.create(agent="refund-bot", step="plan", idempotency_key="r1:0-plan:llm:dd")
    assert crashtest.demo_executions("r1") == {"3-send_email:send_email": 2, "0-plan:llm": 1}


def _model_call(key: str, at) -> None:
    call = ModelCall.objects.create(agent="refund-bot", step="plan", idempotency_key=key)
    ModelCall.objects.filter(pk=call.pk).update(created_at=at)  # auto_now_add set it


def test_a_model_call_a_crash_cut_before_its_step_was_recorded_is_asked_again_not_duplicated():
    """A worker killed mid-call (on a shared pool, by another run's crash) recorded no
    answer: the resumed run must ask again. A call after the step was recorded would be
    a replay that failed, and stays a duplicate."""
    run = _refund_run("r1", "re_1")
    recorded = Step.objects.get(run=run, position=0)
    _model_call("r1:0-plan:llm:dd", recorded.started_at - timedelta(seconds=1))  # cut
    _model_call("r1:0-plan:llm:dd", recorded.started_at)  # the recorded answer's call
    _model_call("r1:3-summary:llm:ee", recorded.finished_at + timedelta(seconds=1))
    counted = crashtest.demo_executions("r1")
    assert counted == {"0-plan:llm": 1, "3-summary:llm": 1}
    assert counted.cut == {"0-plan:llm": 1}
    # A call after its step was recorded (the summary step is the baseline's second call).
    _model_call("r1:3-summary:llm:ee", recorded.finished_at + timedelta(seconds=2))
    assert crashtest.demo_executions("r1")["3-summary:llm"] == 2


def test_a_run_killed_by_another_runs_crash_on_a_shared_pool_is_not_a_failure():
    """On a shared pool a crash kills every run of its worker, which may leave their own
    points unreachable (CI once saw a run killed between its end and its
    after_run_finished point: ended, never taken over, its point never reached)."""
    baseline = _refund_run("base", "re_aaaaaaaa")
    crashed = _refund_run("crashed-7", "re_aaaaaaaa")
    Step.objects.filter(run=crashed).update(executed_by="vm:4242:0badcafe/1")
    ended = crashed.finished_at = timezone.now()
    Run.objects.filter(pk=crashed.pk).update(finished_at=ended)
    counts = Counter({"0-plan:llm": 1, "2-refund:refund": 1})

    def outcome(pool: str, kills: dict[int, float]) -> str:
        case = crashtest.Case(crashpoints.AFTER_RUN_FINISHED, -1, "(run)", crashed.id)
        judge(case, baseline, counts, counts, crashtest.Options(pool=pool), kills)
        return case.outcome

    at_its_end = {4242: ended.timestamp() + 0.01}
    assert outcome("threads", at_its_end) == crashtest.KILLED_ELSEWHERE
    # Where a crash kills only its own run, a point that never fired tested nothing.
    assert outcome("prefork", at_its_end) == crashtest.NOT_REACHED
    # Its process killed long after it ended, or another process killed: its own point
    # should have fired.
    assert outcome("threads", {4242: ended.timestamp() + 5}) == crashtest.NOT_REACHED
    assert outcome("threads", {4343: ended.timestamp()}) == crashtest.NOT_REACHED


def _judged(crashed_counts: Counter) -> crashtest.Case:
    """A crashed refund run resumed after the refund's provider call, counted as given."""
    baseline = _refund_run("base", "re_aaaaaaaa")
    crashed = _refund_run("crashed-7", "re_aaaaaaaa")
    case = crashtest.Case(crashpoints.AFTER_TOOL_RETURNED, 2, "2-refund", crashed.id)
    case.fired_at = case.resumed_at = 1.0
    once = Counter({"0-plan:llm": 1, "2-refund:refund": 1})
    judge(case, baseline, once, crashed_counts, crashtest.Options())
    return case


def test_a_same_key_resend_the_provider_deduplicated_is_not_a_duplicate():
    counted = crashtest.Executions(
        {"0-plan:llm": 1, "2-refund:refund": 1}, deduplicated={"2-refund:refund": 1}
    )
    case = _judged(counted)
    assert case.duplicates == 0 and not case.failed
    assert case.deduplicated == {"2-refund:refund": 1}
    assert case.outcome == crashtest.RESUMED


def test_a_second_execution_of_an_idempotent_write_is_still_a_duplicate():
    """A tool misdeclared idempotent whose provider executed the re-send again."""
    case = _judged(Counter({"0-plan:llm": 1, "2-refund:refund": 2}))
    assert case.duplicates == 1 and case.failed
    assert case.deduplicated == {}


def test_the_report_shows_deduplicated_resends_apart_from_duplicates():
    counted = crashtest.Executions(
        {"0-plan:llm": 1, "2-refund:refund": 1}, deduplicated={"2-refund:refund": 1}
    )
    case = _judged(counted)
    report = crashtest.Report(
        agent="refund-bot",
        run_input={},
        options=crashtest.Options(),
        provider_url="",
        baseline=Run.objects.get(pk="base"),
        baseline_executions=Counter(),
        cases=[case],
        worker_restarts=0,
        seconds=1.0,
    )
    out = io.StringIO()
    report.write(out)
    text = out.getvalue()
    assert "DUPLICATE in" not in text
    assert "DEDUPLICATED in crashed-7: {'2-refund:refund': 1}" in text
    assert "0 duplicate executions, 0 lost" in text
    assert "1 deduplicated same-key re-sends," in text


def test_a_run_resumed_and_finished_between_two_looks_counts_as_resumed(tmp_path, settings):
    """Under load the watcher may first look after the kill, the takeover and the end:
    the row then shows the resumer's fence, so the killed execution's comes from the
    crash record (CI once judged such a run "finished", killed after it had ended)."""
    run = _refund_run("ct-raced", "re_1")
    Run.objects.filter(pk=run.pk).update(fence=2)  # the resumer's lease; it finished
    crashpoints.arm(tmp_path, run.id, crashpoints.BEFORE_STEP, 0)
    settings.DURABLERUNS_CRASH_DIR = str(tmp_path)
    with mock.patch.object(crashpoints.os, "kill"):  # the worker dies here, with lease 1
        crashpoints.crash_point(crashpoints.BEFORE_STEP, run.id, 0, fence=1)
    case = Case(point=crashpoints.BEFORE_STEP, position=0, step="0-plan", run_id=run.id)
    cluster = SimpleNamespace(crash_dir=tmp_path)
    Scheduler(crashtest.Options(), cluster, lambda _: None)._observe({run.id: case})
    assert (case.fence_at_fire, case.resumed_at is not None) == (1, True)
