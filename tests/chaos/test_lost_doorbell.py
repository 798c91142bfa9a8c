"""A doorbell the broker handed to a worker that was SIGKILLed before it took the run's
lease is lost (kombu keeps no copy of a killed consumer's unacked messages): the run
must still start about a second after the death is noticed, not after
DURABLERUNS_REDELIVER_AFTER. Found by the crash matrix on the threads pool
(test_shared_pool_crash_matrix.py), where a crash kills whatever its worker had just
taken: one run in a matrix waited 30 s for the sweeper's redelivery.

Made deterministic here: the test holds a lock on the run's row, so the worker that
took its doorbell blocks in the lease UPDATE, and is killed there.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db.models.functions import Now

from durableruns.engine import doorbell
from durableruns.models import Run
from tests.chaos import fleet_agents
from tests.conftest import database_dsn, terminate_backends, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

WORKER = {
    "pool": "threads",
    "concurrency": 4,
    "extra_env": {
        "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.chaos.fleet_agents",
        "DURABLERUNS_DB_POOL_SIZE": "4",
        "DURABLERUNS_DEAD_OWNER_DETECTION": "1",
        # Far beyond the test's deadline: only the sweeper's redelivery would ring it.
        "DURABLERUNS_REDELIVER_AFTER": "300",
    },
}
LEASE_UPDATE = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND query LIKE 'UPDATE \"durableruns_run\" SET \"lease_owner\"%'"
)


def _task(tmp_path, name: str, gate_open: bool) -> dict:
    gate = tmp_path / f"gate-{name}"
    if gate_open:
        gate.touch()
    return {
        "name": name,
        "gate": str(gate),
        "ledger": str(tmp_path / "ledger"),
        "effects": str(tmp_path / "effects"),
    }


def _queued_run(run_id: str, task: dict) -> Run:
    return Run.objects.create(
        id=run_id,
        agent="fleet-waiter",
        agent_version="1",
        input=task,
        max_steps=20,
        max_duration_seconds=900,
        rang_at=Now(),
    )


def test_a_run_whose_doorbell_died_with_its_worker_starts_when_the_death_is_noticed(
    processes, tmp_path
):
    doomed = processes.worker(**WORKER, name="doomed")
    # A run in flight on the doomed worker, so its death is noticed (its lease's owner).
    _queued_run("in-flight", _task(tmp_path, "in-flight", gate_open=False))
    doorbell.ring("in-flight")
    wait_for(
        lambda: Run.objects.filter(pk="in-flight", status=Run.Status.RUNNING).exists(),
        message="the first run to be in flight",
    )
    _queued_run("rung", _task(tmp_path, "rung", gate_open=True))
    dsn = database_dsn()
    with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as locker:
        locker.execute("SELECT 1 FROM durableruns_run WHERE id = 'rung' FOR UPDATE")
        doorbell.ring("rung")
        blocked = wait_for(
            lambda: admin.execute(LEASE_UPDATE).fetchall(),
            message="the doomed worker to take the doorbell and wait for the row",
        )
        processes.kill(doomed)
        # Postgres would end the blocked statement's session when it next wrote to the
        # dead client; end it now, before the lock is released.
        assert terminate_backends(admin, blocked) == len(blocked)
        locker.commit()
    killed = time.monotonic()
    processes.worker(**WORKER, name="survivor")
    wait_for(
        lambda: Run.objects.filter(pk="rung", status=Run.Status.SUCCEEDED).exists(),
        timeout=30,
        message="the run whose doorbell was lost to finish",
    )
    started_after = time.monotonic() - killed
    rung = Run.objects.get(pk="rung")
    assert rung.leases_taken == 1  # the doomed worker never took it
    assert fleet_agents.executions(tmp_path / "effects")["rung"] == fleet_agents.WAITER
    print(f"the lost doorbell's run finished {started_after:.1f} s after the SIGKILL")
