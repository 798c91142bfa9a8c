"""The hours an escalated run waits for a person are not the agent's to budget, as an
approval's wait is not: resolved, it goes on instead of failing its time budget, and its
page does not count the wait as the run's time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

import durableruns as dr
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from durableruns.services import escalations

pytestmark = pytest.mark.django_db(transaction=True)
HOURS = timedelta(hours=3)


@dr.tool(kind=dr.UNSAFE_WRITE)
def wire_times_out(*, idempotency_key: str) -> str:
    raise TimeoutError("read timed out")


@dr.agent("t-escalation-budget", version="1", max_duration=timedelta(minutes=10))
def escalation_budget(run: dr.Run, task: dict) -> object:
    wired = run.call(wire_times_out)
    return run.step("confirm", lambda: f"confirmed {wired}")


def _escalated_hours_ago(drive, agent: str = "t-escalation-budget", run_id="esc-budget") -> Run:
    start_run(agent, {}, run_id=run_id)
    run = drive(run_id)
    assert run.status == Run.Status.ESCALATED, run.error
    # The person took three hours to check with the bank.
    Run.objects.filter(pk=run.pk).update(
        started_at=run.started_at - HOURS, escalated_at=run.escalated_at - HOURS
    )
    return Run.objects.get(pk=run.pk)


def _resolved_and_finished(drive, run: Run, bob, result: str) -> Run:
    """The person says the write happened; the run goes on to its end."""
    effect = Effect.objects.get(run=run, state=Effect.State.UNKNOWN)
    escalations.resolve(effect, "happened", user=bob, result=result, note="the bank shows it")
    finished = drive(run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    return finished


def test_a_run_resolved_hours_after_it_escalated_goes_on(drive, bob):
    finished = _resolved_and_finished(drive, _escalated_hours_ago(drive), bob, "w-1")
    assert finished.result == "confirmed w-1"
    assert finished.escalated_seconds >= HOURS.total_seconds()
    assert finished.escalated_at is None


def test_the_page_of_an_escalated_run_does_not_count_the_wait(drive, client, bob):
    run = _escalated_hours_ago(drive)
    client.force_login(bob)
    budget = client.get(reverse("run", args=[run.id])).context["budget"]
    assert budget["seconds"] < 60, budget
    assert budget["waiting_text"].startswith("3 h")


def test_an_operator_resume_ends_the_wait_too(drive, bob):
    run = _escalated_hours_ago(drive)
    Effect.objects.filter(run=run).update(
        state=Effect.State.RESOLVED, resolution="aborted", resolved_at=timezone.now()
    )
    from durableruns.services import runs

    assert runs.resume(Run.objects.get(pk=run.pk), user=bob, reason="checked by hand")
    resumed = Run.objects.get(pk=run.pk)
    assert resumed.escalated_at is None and resumed.escalated_seconds >= HOURS.total_seconds()


def test_the_timeline_shows_the_step_whose_outcome_is_unknown(drive, client, bob):
    run = _escalated_hours_ago(drive)
    client.force_login(bob)
    page = client.get(reverse("run", args=[run.id])).content.decode()
    assert 'id="step-escalated-0"' in page and "outcome unknown" in page


@dr.tool(kind=dr.READ_ONLY)
def look_up(*, order: str, idempotency_key: str) -> str:
    return f"order {order}"


@dr.agent("t-escalation-budget-fan", version="1", max_duration=timedelta(minutes=10))
def escalation_budget_fan(run: dr.Run, task: dict) -> object:
    found, wired = run.parallel(
        [lambda: run.call(look_up, order="A-1"), lambda: run.call(wire_times_out)]
    )
    return run.step("confirm", lambda: f"{found}: confirmed {wired}")


def test_a_fan_out_resolved_hours_after_its_branch_escalated_goes_on(drive, bob):
    """The unknown write is one branch of a parallel step: the same wait, the same rule."""
    run = _escalated_hours_ago(drive, "t-escalation-budget-fan", "esc-budget-fan")
    finished = _resolved_and_finished(drive, run, bob, "w-2")
    assert finished.result == "order A-1: confirmed w-2"
    assert finished.escalated_seconds >= HOURS.total_seconds()


@dr.agent("t-escalation-budget-boss", version="1", max_duration=timedelta(minutes=10))
def escalation_budget_boss(run: dr.Run, task: dict) -> object:
    return {"child": run.child("t-escalation-budget", {})}


def test_a_parent_whose_child_escalated_hours_ago_goes_on(drive, bob, rung):
    """The child's person-wait is not the parent's time either: it waited on the child."""
    start_run("t-escalation-budget-boss", {}, run_id="esc-boss")
    assert drive("esc-boss").status == Run.Status.AWAITING_CHILD
    child = drive("esc-boss.c0")
    assert child.status == Run.Status.ESCALATED, child.error
    for run in Run.objects.filter(pk__in=["esc-boss", "esc-boss.c0"]):
        Run.objects.filter(pk=run.pk).update(
            started_at=run.started_at - HOURS,
            escalated_at=run.escalated_at and run.escalated_at - HOURS,
        )
    _resolved_and_finished(drive, child, bob, "w-3")
    finished = drive("esc-boss")

    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert finished.result == {"child": "confirmed w-3"}
