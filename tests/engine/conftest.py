from __future__ import annotations

import time

import pytest

from durableruns.engine import doorbell, executor
from durableruns.models import Run
from tests.engine import agents


@pytest.fixture(autouse=True)
def _reset_counters():
    agents.CALLS.clear()
    agents.FAILURES.clear()


@pytest.fixture
def rung(monkeypatch) -> list[str]:
    """Doorbells rung during the test, instead of messages to a broker nobody consumes.
    The real doorbell is exercised by the tests that start worker processes."""
    rings: list[str] = []
    monkeypatch.setattr(doorbell, "_publish", lambda run_id, countdown: rings.append(run_id))
    return rings


@pytest.fixture
def drive(rung, settings):
    """Advance a run in this process until it stops or finishes, waiting out wake-ups."""
    settings.DURABLERUNS_RETRY_BASE_DELAY = 0.01
    settings.DURABLERUNS_RETRY_MAX_DELAY = 0.02

    def drive_run(run_id: str, *, max_tasks: int = 20) -> Run:
        for _ in range(max_tasks):
            run = Run.objects.get(pk=run_id)
            if run.status not in Run.EXECUTABLE:
                return run
            if run.wake_at:
                time.sleep(max(0.0, (run.wake_at - _now()).total_seconds()) + 0.01)
            executor.advance(run_id)
        return Run.objects.get(pk=run_id)

    return drive_run


def _now():
    from django.utils import timezone

    return timezone.now()
