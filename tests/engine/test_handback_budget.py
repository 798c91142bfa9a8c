"""Waiting for a worker that has the run's agent (a hand-back, in a rolling deploy)
is not the run's time: like approval waits and sleeps, it does not count against
max_duration. Working time around it still does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

import pytest
from django.utils import timezone

import durableruns as dr
from durableruns.engine import executor, registry
from durableruns.engine.runs import start_run
from durableruns.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

BUDGET = timedelta(seconds=1)


@dr.agent("t-handback-budget", version="1", max_duration=BUDGET)
def naps_then_works(run: dr.Run, task: dict) -> str:
    run.step("before", lambda: "before")
    run.sleep("nap", 0.05)
    run.step("work", time.sleep, task.get("work", 0))
    return run.step("after", lambda: "done")  # the budget is checked before each step


@pytest.fixture
def handed_back(settings) -> Callable[[], AbstractContextManager[None]]:
    """In its block, this process lacks the agent's version 1 (a v2-only worker)."""
    settings.DURABLERUNS_HANDBACK_DELAY = 1.5  # longer than the run's whole budget

    @contextmanager
    def lacking() -> Iterator[None]:
        definition = registry.get_agent("t-handback-budget", "1")
        registry.unregister_agent("t-handback-budget", "1")
        try:
            yield
        finally:
            dr.agent("t-handback-budget", version="1", max_duration=BUDGET)(definition.fn)

    return lacking


def _wait_until_due(run_id: str) -> None:
    run = Run.objects.get(pk=run_id)
    time.sleep(max(0.0, (run.wake_at - timezone.now()).total_seconds()) + 0.01)


def test_a_hand_back_before_the_first_step_does_not_use_the_budget(drive, handed_back):
    start_run("t-handback-budget", {}, run_id="hb-first")
    with handed_back():
        assert executor.advance("hb-first") == "handed-back"

    run = drive("hb-first")

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.handed_back_seconds >= 1.5


def test_a_hand_back_mid_run_does_not_use_the_budget(drive, handed_back):
    start_run("t-handback-budget", {}, run_id="hb-mid")
    assert executor.advance("hb-mid") == Run.Status.WAITING  # "before" done, napping
    _wait_until_due("hb-mid")
    with handed_back():
        assert executor.advance("hb-mid") == "handed-back"
        _wait_until_due("hb-mid")
        assert executor.advance("hb-mid") == "handed-back"  # a second v2-only worker

    run = drive("hb-mid")

    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.handed_back_seconds >= 3.0  # both hand-backs, from the first one on
    assert run.last_error is None  # no longer shown as waiting for a worker


def test_working_time_after_a_hand_back_still_counts(drive, handed_back):
    start_run("t-handback-budget", {"work": 1.2}, run_id="hb-work")
    with handed_back():
        executor.advance("hb-work")

    run = drive("hb-work")

    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "budget_exceeded"
