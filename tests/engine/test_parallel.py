"""Parallel steps (engine/parallel.py): run.parallel and run.map run branches at once,
each its own step at the position its submission order gives it, committed as it
completes; a resume executes only the branches without a recorded step."""

from __future__ import annotations

import json
import threading

import pytest

from durableruns.engine import crashpoints, executor, replay
from durableruns.engine.runs import start_run
from durableruns.models import Approval, Effect, Run, Step
from durableruns.services import approvals
from durableruns.testing import crashtest
from tests.engine import agents_parallel as agents

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _reset():
    agents.reset()


def _steps(run_id: str) -> list[Step]:
    return list(Step.objects.filter(run_id=run_id).order_by("position"))


def _approve(run_id: str, user) -> None:
    approval = Approval.objects.get(run_id=run_id, state=Approval.State.PENDING)
    approvals.decide(approval, "approve", user=user)


def test_it_gives_branches_the_ids_of_their_submission_order_not_completion(drive):
    reverse, _ = start_run("t-fan-out", {"delays": [0.4, 0.2, 0.0]}, run_id="fan-reverse")
    forward, _ = start_run("t-fan-out", {"delays": [0.0, 0.0, 0.0]}, run_id="fan-forward")
    assert drive(reverse.id).status == Run.Status.SUCCEEDED
    assert drive(forward.id).status == Run.Status.SUCCEEDED
    steps = _steps(reverse.id)[:3]
    # The last submitted finished first...
    assert steps[2].finished_at < steps[1].finished_at < steps[0].finished_at
    # ...and still has the last position, the same step ids as any other order.
    ids = ["0-branch-0", "1-branch-1", "2-branch-2"]
    assert [step.step_id for step in steps] == ids
    assert [step.step_id for step in _steps(forward.id)[:3]] == ids
    assert [step.fan_out for step in _steps(reverse.id)] == [0, 0, 0, None]
    assert Run.objects.get(pk=reverse.id).result == {"values": [0, 10, 20], "after": 990}


def test_it_runs_the_branches_at_once(drive):
    agents.OVERLAP["fan-out"] = threading.Barrier(3)
    run, _ = start_run("t-overlap", {"width": 3}, run_id="fan-overlap")
    run = drive(run.id)
    # Each branch waited at a barrier for the other two: one at a time, none would pass.
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == ["meet-0", "meet-1", "meet-2"]
    steps = _steps(run.id)
    assert max(s.started_at for s in steps) < min(s.finished_at for s in steps)


def test_it_replays_every_branch_in_submission_order_without_executing_it(drive, alice):
    run, _ = start_run("t-fan-out", {"delays": [0.2, 0.1, 0.0], "then_approval": True})
    assert drive(run.id).status == Run.Status.AWAITING_APPROVAL
    assert agents.CALLS == {"branch-0": 1, "branch-1": 1, "branch-2": 1}
    _approve(run.id, alice)
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result["values"] == [0, 10, 20]
    assert agents.CALLS == {"branch-0": 1, "branch-1": 1, "branch-2": 1, "branch-99": 1}
    report = replay.dry_replay(run)
    assert report.ok and report.result == run.result
    assert [entry.name for entry in report.entries[:3]] == ["branch-0", "branch-1", "branch-2"]


def test_it_names_both_sides_when_a_branch_differs_from_history(drive, alice):
    run, _ = start_run("t-fan-out-variant", {}, run_id="fan-diverge")
    assert drive(run.id).status == Run.Status.AWAITING_APPROVAL
    agents.VARIANT["second"] = 7  # the next pass asks branch 1 for other arguments
    _approve(run.id, alice)
    run = drive(run.id)
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "non_determinism"
    assert run.error["position"] == 1
    recorded = Step.objects.get(run=run, position=1)
    assert run.error["expected"] == f"compute step 'branch-1' (args {recorded.fingerprint})"
    assert run.error["actual"].startswith("compute step 'branch-1' (args ")
    assert run.error["actual"] != run.error["expected"]
    assert agents.CALLS == {"branch-0": 1, "branch-1": 1, "branch-2": 1}  # nothing ran again


def test_a_diverged_branch_stops_the_fan_out_before_a_pending_branch_runs_again(rung):
    run, _ = start_run("t-fan-out-flaky", {"failures": 1}, run_id="fan-diverge-pending")
    assert executor.advance(run.id) == Run.Status.WAITING  # "flaky" failed, due again
    Run.objects.filter(pk=run.id).update(wake_at=None)
    agents.VARIANT["first"] = 5
    assert executor.advance(run.id) == "failed"
    run = Run.objects.get(pk=run.id)
    assert (run.error["code"], run.error["position"]) == ("non_determinism", 0)
    assert agents.CALLS["flaky"] == 1  # the branch without a step was not executed again
    assert Step.objects.filter(run=run).count() == 2


def test_it_counts_branches_against_the_step_budget_before_any_runs(drive):
    run, _ = start_run("t-fan-out-budget", {}, run_id="fan-budget")
    run = drive(run.id)
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "budget_exceeded"
    assert "a fan-out of 3 branches at step 1" in run.error["message"]
    assert agents.CALLS == {"branch-0": 1}  # the step before it; no branch started


def test_it_retries_only_the_branch_that_failed(drive):
    run, _ = start_run("t-fan-out-flaky", {"failures": 2}, run_id="fan-flaky")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == [0, "flaky", 20]
    assert agents.CALLS == {"branch-0": 1, "flaky": 3, "branch-2": 1}
    assert Step.objects.get(run=run, position=1).attempts == 3


def test_it_raises_the_first_failure_after_every_branch_settled(drive):
    run, _ = start_run("t-fan-out-failing", {}, run_id="fan-failing")
    run = drive(run.id)
    assert run.status == Run.Status.FAILED
    assert run.error["type"] == "PermanentError"
    assert "declined-1: the card was declined" in run.error["message"]
    assert agents.CALLS == {"branch-0": 1, "declined-1": 1, "declined-2": 1, "branch-3": 1}
    assert Step.objects.filter(run=run).count() == 4  # every branch committed its outcome


def test_it_returns_each_failure_in_its_place_when_asked(drive):
    run, _ = start_run("t-fan-out-failing", {"return_exceptions": True})
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result[0] == 0 and run.result[3] == 30
    assert "declined-1" in run.result[1] and "declined-2" in run.result[2]


def test_it_suspends_for_a_branchs_approval_after_the_others_commit(drive, alice):
    run, _ = start_run("t-fan-out-approval", {}, run_id="fan-approval")
    assert drive(run.id).status == Run.Status.AWAITING_APPROVAL
    assert [(s.position, s.name) for s in _steps(run.id)] == [(1, "branch-1")]
    _approve(run.id, alice)
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == {"approved": True, "value": 10}
    assert agents.CALLS == {"branch-1": 1}
    assert Step.objects.get(run=run, position=0).fan_out == 0


def test_it_gives_each_mapped_call_its_own_effect_and_key(drive):
    run, _ = start_run("t-map-charges", {"orders": ["a", "b", "c"]}, run_id="fan-map")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    keys = [value["key"] for value in run.result]
    effects = Effect.objects.filter(run=run).order_by("position")
    assert keys == list(effects.values_list("idempotency_key", flat=True))
    assert [key.split(":")[1] for key in keys] == ["0-charge", "1-charge", "2-charge"]
    assert agents.CALLS == {"charge-a": 1, "charge-b": 1, "charge-c": 1}
    assert executor.advance(run.id) == "skipped"


def test_it_refuses_a_branch_that_makes_two_steps(drive):
    run, _ = start_run("t-fan-out-misuse", {}, run_id="fan-misuse")
    run = drive(run.id)
    assert run.status == Run.Status.FAILED
    assert "makes exactly one run.* call" in run.error["message"]


def test_it_refuses_a_tool_given_as_a_branch_before_calling_it(drive):
    """Called as a plain function the tool would run with no key and no ledger entry."""
    run, _ = start_run("t-fan-out-bare-tool", {}, run_id="fan-bare-tool")
    run = drive(run.id)
    assert run.status == Run.Status.FAILED
    assert "lambda: run.call(send_notice" in run.error["message"], run.error
    assert agents.CALLS["send-notice"] == 0
    assert not Effect.objects.filter(run=run).exists()


def test_call_tools_runs_a_replys_three_calls_at_once_in_the_replys_order(
    drive, provider_url, settings
):
    settings.DURABLERUNS_MODEL_URL = f"{provider_url}/providers/v1"
    agents.OVERLAP["fan-out"] = threading.Barrier(3)
    run, _ = start_run("t-tool-calls-at-once", {"question": "refund?"}, run_id="fan-tools")
    run = drive(run.id)
    # The three tools met at a barrier: run one after the other, none would pass it.
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert agents.CALLS == {"meet_a": 1, "meet_b": 1, "meet_c": 1}
    steps = _steps(run.id)
    branches = [s for s in steps if s.fan_out is not None]
    assert [(s.position, s.tool, s.fan_out) for s in branches] == [
        (1, "meet_a", 1),
        (2, "meet_b", 1),
        (3, "meet_c", 1),
    ]
    assert max(s.started_at for s in branches) < min(s.finished_at for s in branches)
    # The model got the results in its reply's order, whichever finished first.
    messages = steps[-1].input["messages"]
    results = [json.loads(m["content"])["tool"] for m in messages if m["role"] == "tool"]
    assert results == ["meet_a", "meet_b", "meet_c"]


def test_the_crash_matrix_kills_a_fan_out_at_each_branch_after_the_first(drive):
    run, _ = start_run("t-fan-out", {}, run_id="fan-matrix")
    run = drive(run.id)
    planned = {(case.point, case.position) for case in crashtest.plan_cases(run, "s1")}
    assert {pos for point, pos in planned if point == crashpoints.MID_FAN_OUT} == {1, 2}


def test_the_demo_triage_bot_runs_its_three_tool_calls_as_one_fan_out(drive, provider_url):
    run, _ = start_run("triage-bot", {"question": "Where is my refund?"}, run_id="fan-triage")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result.startswith("Done. ")
    assert [(s.kind, s.tool, s.fan_out) for s in _steps(run.id)] == [
        ("llm", "", None),
        ("tool", "lookup_order", 1),
        ("tool", "search_articles", 1),
        ("tool", "send_email", 1),
        ("llm", "", None),
    ]
