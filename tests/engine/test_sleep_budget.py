"""Durable sleeps, like approval waits, do not count against a run's max_duration."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durableruns as dr
from durableruns.engine.runs import start_run
from durableruns.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


@dr.agent("t-sleep-budget", version="1", max_duration=timedelta(seconds=1))
def sleeps_past_its_budget(run: dr.Run, task: dict) -> str:
    run.sleep("nap", 1.5)
    return run.step("after", lambda: "awake")


@dr.agent("t-sleep-then-busy", version="1", max_duration=timedelta(seconds=1))
def busy_after_sleeping(run: dr.Run, task: dict) -> None:
    import time

    run.sleep("nap", 0.3)
    for i in range(30):
        run.step(f"work-{i}", time.sleep, 0.1)


def test_a_sleep_longer_than_max_duration_does_not_exhaust_it(drive):
    start_run("t-sleep-budget", {}, run_id="sb")
    run = drive("sb")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == "awake"


def test_working_time_after_a_sleep_still_counts(drive):
    start_run("t-sleep-then-busy", {}, run_id="sw")
    run = drive("sw")
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "budget_exceeded"
