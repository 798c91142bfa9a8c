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


def _escalated_hours_ago(drive) -> Run:
    start_run("t-escalation-budget", {}, run_id="esc-budget")
    run = drive("esc-budget")
    assert run.status == Run.Status.ESCALATED, run.error
    # The person took three hours to check with the bank.
    Run.objects.filter(pk=run.pk).update(
        started_at=run.started_at - HOURS, escalated_at=run.escalated_at - HOURS
    )
    return Run.objects.get(pk=run.pk)


def test_a_run_resolved_hours_after_it_escalated_goes_on(drive, bob):
    run = _escalated_hours_ago(drive)
    effect = Effect.objects.get(run=run, state=Effect.State.UNKNOWN)
    escalations.resolve(effect, "happened", user=bob, result="w-1", note="the bank shows it")

    finished = drive(run.id)

    assert finished.status == Run.Status.SUCCEEDED, finished.error
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
