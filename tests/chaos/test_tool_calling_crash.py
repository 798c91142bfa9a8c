"""SIGKILL a real worker while a tool-calling agent runs against the stand-in model on
real HTTP: the resumed run replays the recorded tool calls without asking the model
again, and every tool call executes once."""

from __future__ import annotations

from collections import Counter

import pytest

import tests.agents_toolcalling  # noqa: F401 - registers support-bot in this process too
from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine import crashpoints
from durableruns.engine.runs import start_run
from durableruns.models import Run, Step
from tests.conftest import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

QUESTION = {"question": "Where is my refund for order A-1001?"}


def _env(live_server) -> dict[str, str]:
    return {
        "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.agents_toolcalling",
        "DURABLERUNS_MODEL_URL": f"{live_server.url}/providers/v1",
    }


def _finished(run_id: str) -> bool:
    return Run.objects.filter(pk=run_id, status__in=Run.TERMINAL).exists()


def _tool_calls(run_id: str) -> list:
    steps = Step.objects.filter(run_id=run_id, kind=Step.Kind.LLM).order_by("position")
    return [step.result["tool_calls"] for step in steps]


def _executions(run_id: str) -> Counter:
    rows = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run_id}:", outcome=ProviderCall.Outcome.EXECUTED
    )
    return Counter(key.split(":")[2] for key in rows.values_list("idempotency_key", flat=True))


@pytest.mark.parametrize(
    ("point", "position"),
    [
        (crashpoints.AFTER_STEP_COMMIT, 0),  # the model's tool calls just recorded
        (crashpoints.AFTER_TOOL_RETURNED, 2),  # the refund made, its ledger row not written
    ],
)
def test_a_resumed_run_replays_the_models_tool_calls_without_calling_it_again(
    processes, crash_dir, live_server, point, position
):
    env = _env(live_server)
    processes.beat()
    baseline_worker = processes.worker(extra_env=env)
    start_run("support-bot", QUESTION, run_id="baseline")
    wait_for(lambda: _finished("baseline"), message="the baseline run")
    processes.kill(baseline_worker)

    crashpoints.arm(crash_dir, "crashed", point, position)
    first = processes.worker(extra_env={**env, "DURABLERUNS_CRASH_DIR": str(crash_dir)})
    start_run("support-bot", QUESTION, run_id="crashed")
    wait_for(lambda: first.poll() is not None, message="the worker to kill itself")
    processes.kill(first)
    assert not _finished("crashed")

    processes.worker(extra_env=env)
    wait_for(lambda: _finished("crashed"), message="the crashed run to finish")
    crashed, baseline = Run.objects.get(pk="crashed"), Run.objects.get(pk="baseline")
    assert crashed.status == Run.Status.SUCCEEDED, crashed.error
    assert crashed.leases_taken >= 2  # it really was resumed by another worker
    assert _tool_calls("crashed") == _tool_calls("baseline")
    model_calls = ModelCall.objects.filter(idempotency_key__startswith="crashed:")
    assert Counter(model_calls.values_list("step", flat=True)) == {"0-turn-0": 1, "4-turn-1": 1}
    assert _executions("crashed") == _executions("baseline") == {"refund": 1, "send_email": 1}
    # Tokens and cost summed once per model call, whatever the crash.
    assert (crashed.tokens_in, crashed.tokens_out, crashed.cost) == (
        baseline.tokens_in,
        baseline.tokens_out,
        baseline.cost,
    )
    assert crashed.tokens_out == 14
