"""SIGKILL a real worker in the middle of a fan-out (engine/parallel.py): the resumed run
executes only the branches that had not committed, and every refund is made once."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from django.core.management import call_command

import tests.chaos.parallel_agents  # noqa: F401 - registers parallel-refunds here too
from durableruns.demo.models import ProviderCall
from durableruns.engine import crashpoints
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run, Step
from tests.conftest import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

ENV = {"DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.chaos.parallel_agents"}


def _finished(run_id: str) -> bool:
    return Run.objects.filter(pk=run_id, status__in=Run.TERMINAL).exists()


def _provider_requests(run_id: str) -> Counter:
    """Requests the payments provider received per branch step ("2-refund_unsafe")."""
    keys = ProviderCall.objects.filter(idempotency_key__startswith=f"{run_id}:")
    return Counter(key.split(":")[1] for key in keys.values_list("idempotency_key", flat=True))


def _crash(processes, crash_dir, run_id: str, task: dict, point: str, position: int) -> Run:
    crashpoints.arm(crash_dir, run_id, point, position)
    first = processes.worker(extra_env={**ENV, "DURABLERUNS_CRASH_DIR": str(crash_dir)})
    start_run("parallel-refunds", task, run_id=run_id)
    wait_for(lambda: first.poll() is not None, message="the worker to kill itself")
    processes.kill(first)
    assert crashpoints.fired(crash_dir, run_id) is not None
    assert not _finished(run_id)
    processes.worker(extra_env=ENV)
    wait_for(lambda: _finished(run_id), message="the crashed run to finish")
    return Run.objects.get(pk=run_id)


def test_it_executes_only_the_branches_not_committed_before_the_kill(processes, crash_dir):
    processes.beat()
    run = _crash(
        processes, crash_dir, "fan-kill", {"width": 4, "unsafe": True}, crashpoints.MID_FAN_OUT, 2
    )
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == 4 and run.leases_taken == 2
    steps = Step.objects.filter(run=run).order_by("position")
    # Branches 0 and 1 committed under the first lease; the second executed only 2 and 3.
    assert [(s.position, s.fan_out, s.lease_number) for s in steps] == [
        (0, 0, 1),
        (1, 0, 1),
        (2, 0, 2),
        (3, 0, 2),
    ]
    # An unsafe write never re-sent: one request per branch, no escalation.
    assert _provider_requests(run.id) == {f"{i}-refund_unsafe": 1 for i in range(4)}
    assert not Effect.objects.filter(run=run, state=Effect.State.UNKNOWN).exists()


def test_a_kill_while_branches_are_in_flight_makes_each_refund_once(processes, crash_dir):
    processes.beat()
    run = _crash(
        processes, crash_dir, "fan-inflight", {"width": 4}, crashpoints.AFTER_STEP_COMMIT, 1
    )
    assert run.status == Run.Status.SUCCEEDED, run.error
    executed = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run.id}:", outcome=ProviderCall.Outcome.EXECUTED
    )
    keys = Counter(executed.values_list("idempotency_key", flat=True))
    assert len(keys) == 4 and set(keys.values()) == {1}  # each refund made once
    assert Step.objects.get(run=run, position=1).lease_number == 1


def test_crashtest_kills_the_demo_fan_out_with_some_branches_committed(settings, capsys):
    """`manage.py crashtest triage-bot`: its reply's three tool calls are one fan-out, so
    the matrix also kills it with branch 1 (then 1 and 2) committed and the rest not."""
    settings.DURABLERUNS_PROVIDER_URL = "http://127.0.0.1:9"  # crashtest serves the providers
    call_command(
        "crashtest", "triage-bot", "--input", '{"question": "Where is my refund?"}',
        "--workers", "2", "--pool", "prefork",
    )  # fmt: skip
    out = capsys.readouterr().out
    for step in ("2-search_articles", "3-send_email"):
        assert re.search(rf"^mid_fan_out\s+{step}\s+resumed\s+0\s", out, re.M), out
    assert "0 duplicate executions, 0 lost" in out
