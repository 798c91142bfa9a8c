"""One liveness rule, native side: a worker executing a native run holds its liveness
(lease, heartbeat and the run's lock), so the sweepers (dead-owner detection on) never
take over a write that simply runs long. The LangGraph side is
test_langgraph_liveness.py; both run a call longer than three sweep intervals."""

from __future__ import annotations

import pytest

import tests.chaos.slow_agents  # noqa: F401 - registers slow-email here; workers import it
from durableruns.demo.models import ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from tests.conftest import TEST_LEASE_TTL, TEST_SWEEP_INTERVAL, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def test_a_write_longer_than_three_sweep_intervals_and_the_lease_runs_once(processes):
    env = {
        "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.chaos.slow_agents",
        "DURABLERUNS_DEAD_OWNER_DETECTION": "1",
        "SLOW_SEND_SECONDS": str(max(3 * TEST_SWEEP_INTERVAL, 2 * TEST_LEASE_TTL) + 1),
    }
    # Two workers (each with its sweeper), so a wrongful takeover has somewhere to run.
    processes.worker(extra_env=env)
    processes.worker(extra_env=env)
    start_run("slow-email", {"to": "ann@example.com"}, run_id="slow-native")

    settled = [*Run.TERMINAL, Run.Status.ESCALATED]  # a takeover would escalate the write
    wait_for(
        lambda: Run.objects.filter(pk="slow-native", status__in=settled).exists(),
        timeout=60,
        message="the run to finish",
    )
    run = Run.objects.get(pk="slow-native")
    assert run.status == Run.Status.SUCCEEDED, (run.status, run.error, run.last_error)
    assert run.leases_taken == 1  # never taken over
    assert Effect.objects.get(run_id="slow-native").state == Effect.State.SUCCEEDED
    sent = ProviderCall.objects.filter(
        idempotency_key__startswith="slow-native:", outcome=ProviderCall.Outcome.EXECUTED
    )
    assert sent.count() == 1
