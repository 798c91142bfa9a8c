"""Recovery in about a second with the production defaults, and sweeping without a
single beat (invariant 7): real workers, SIGKILLed."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

import tests.agents  # noqa: F401 - registers the test agents in this process too
from durableruns.engine.runs import start_run
from durableruns.models import Run, SweeperBeat
from tests.chaos.test_faults import (
    AGENT_MODULES,
    _all_finished,
    _assert_checkpointed_once,
    _fence,
    _figures,
    _ledger,
    _ready,
    _status,
    _worker_by_pid,
)
from tests.conftest import Processes, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

PRODUCTION = {"DURABLERUNS_LEASE_TTL": "30", "DURABLERUNS_SWEEP_INTERVAL": "5"}


@pytest.fixture
def faults(processes: Processes) -> Processes:
    processes.env["DURABLERUNS_AGENT_MODULES"] = AGENT_MODULES
    return processes


def _next_start(ledger, dead: int, after: float) -> list[float]:
    rows = _ledger(ledger)
    return [at for event, _, pid, at in rows if event == "start" and pid != dead and at > after]


def test_it_starts_the_next_step_within_two_seconds_of_a_sigkill_with_production_defaults(
    faults, tmp_path
):
    kills = 4
    faults.env.update(PRODUCTION)
    workers = [faults.worker() for _ in range(kills + 1)]
    wait_for(lambda: all(_ready(faults, w) for w in workers), message="every worker")
    ledger = tmp_path / "ledger"
    start_run("slow-bot", {"ledger": str(ledger), "steps": 4 * kills, "seconds": 0.3}, run_id="r")
    resumes = []
    for _ in range(kills):
        seen = len(_ledger(ledger))
        executor = wait_for(
            lambda n=seen: [pid for event, _, pid, _ in _ledger(ledger)[n:] if event == "start"],
            message="a step to start",
        )[0]
        fence = _fence("r")
        killed_wall = time.time()
        faults.kill(_worker_by_pid(faults, executor))
        resumed = wait_for(
            lambda dead=executor, t=killed_wall: _next_start(ledger, dead, t),
            interval=0.01,
            timeout=40,
            message="the next step to start on another worker",
        )
        resumes.append(resumed[0] - killed_wall)
        assert _fence("r") > fence

    print(f"\nnext step after SIGKILL (lease 30 s, sweep 5 s): {_figures(resumes)}")
    assert max(resumes) < 2.0, resumes
    wait_for(lambda: _all_finished(["r"]), timeout=60, message="the run to finish")
    assert _status("r") == Run.Status.SUCCEEDED
    _assert_checkpointed_once("r")


def _swept_after(moment: float) -> SweeperBeat | None:
    beat = SweeperBeat.objects.filter(id=1).first()
    return beat if beat and beat.swept_at.timestamp() > moment else None


def _leader_pid() -> int:
    return int(SweeperBeat.objects.get(id=1).swept_by.rsplit(":", 1)[1])


def test_it_keeps_sweeping_when_beat_or_any_worker_dies(faults, client, settings):
    interval = 1.0
    settings.DURABLERUNS_SWEEP_INTERVAL = interval
    faults.env["DURABLERUNS_SWEEP_INTERVAL"] = str(interval)
    beat = faults.beat()
    workers = [faults.worker() for _ in range(3)]
    wait_for(lambda: all(_ready(faults, w) for w in workers), message="every worker")
    wait_for(lambda: _swept_after(0), message="a first sweep")
    assert client.get(reverse("healthz")).status_code == 200

    killed = time.time()
    faults.kill(beat)
    wait_for(lambda: _swept_after(killed), timeout=2 * interval, message="a sweep after beat")

    gaps = []
    for _ in range(len(workers) - 1):
        leader = _worker_by_pid(faults, _leader_pid())
        killed = time.time()
        faults.kill(leader)
        after = wait_for(
            lambda t=killed: _swept_after(t),
            timeout=2 * interval,
            interval=0.02,
            message="another worker to take over the sweep",
        )
        gaps.append(after.swept_at.timestamp() - killed)
        assert after.swept_by.rsplit(":", 1)[1] != str(leader.pid)
    print(f"\nfirst sweep after the leader's SIGKILL: {[f'{g:.2f}' for g in gaps]} s")

    faults.kill(_worker_by_pid(faults, _leader_pid()))
    stale = wait_for(
        lambda: (r := client.get(reverse("healthz"))).status_code == 503 and r,
        timeout=settings.DURABLERUNS_SWEEP_STALE_AFTER * interval + 3,
        message="/healthz to say the sweeper is gone",
    )
    assert stale.json()["sweeper"] == "stale"

    faults.worker()
    wait_for(
        lambda: client.get(reverse("healthz")).status_code == 200,
        timeout=30,
        message="/healthz healthy once a worker sweeps again",
    )
