"""SIGKILL real Celery workers mid-run; the run must finish with nothing done twice."""

from __future__ import annotations

from collections import Counter

import pytest

from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine import crashpoints
from durableruns.engine.runs import start_run
from durableruns.models import Run
from tests.conftest import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

REFUND = {"order_id": "A-1001", "payments": "dedupe", "email": "dedupe"}


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _finished(run_id: str) -> bool:
    return _status(run_id) in Run.TERMINAL


def _executions(run_id: str) -> Counter:
    """Real executions per step and tool (arguments may embed run-specific ids)."""
    rows = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run_id}:", outcome=ProviderCall.Outcome.EXECUTED
    )
    keys = rows.values_list("idempotency_key", flat=True)
    return Counter(":".join(key.split(":")[1:3]) for key in keys)


def _model_calls(run_id: str) -> Counter:
    rows = ModelCall.objects.filter(idempotency_key__startswith=f"{run_id}:")
    return Counter(rows.values_list("step", flat=True))


def _uninterrupted(processes) -> tuple[Run, Counter]:
    run, _ = start_run("refund-bot", REFUND, run_id="baseline")
    wait_for(lambda: _finished(run.id), message="baseline run")
    return Run.objects.get(pk=run.id), _executions(run.id)


@pytest.mark.parametrize(
    ("point", "position"),
    [
        (crashpoints.AFTER_STEP_COMMIT, 0),  # right after the model planned
        (crashpoints.AFTER_TOOL_RETURNED, 2),  # refund executed, ledger not yet written
    ],
)
def test_it_resumes_on_a_new_worker_without_repeating_anything(
    processes, crash_dir, point, position
):
    first = processes.worker(extra_env={"DURABLERUNS_CRASH_DIR": str(crash_dir)})
    processes.beat()
    baseline, baseline_effects = _uninterrupted(processes)

    crashpoints.arm(crash_dir, "crashed", point, position)
    start_run("refund-bot", REFUND, run_id="crashed")
    wait_for(lambda: first.poll() is not None, message="the worker to kill itself")
    processes.kill(first)  # reap the whole process group, children included
    assert not _finished("crashed")

    processes.worker()
    wait_for(lambda: _finished("crashed"), message="the crashed run to finish")
    crashed = Run.objects.get(pk="crashed")
    assert crashed.status == Run.Status.SUCCEEDED, crashed.error
    assert _executions("crashed") == baseline_effects
    assert set(baseline_effects.values()) == {1}
    assert set(_model_calls("crashed").values()) == {1}
    assert crashed.result["summary"].split()[:3] == baseline.result["summary"].split()[:3]
