"""Recovery: SIGKILL the worker that holds a run's lease; time until its next step starts.

Three solo-pool workers and a beat (the sweeper) run with a short lease TTL and
sweep interval, printed in the results. The run ticks through short steps; the
benchmark kills whichever worker holds the lease (its pid is in `lease_owner`),
starts a replacement, and measures from the kill to the `started_at` of the first
step that began after it (same host clock). It includes the rest of the lease,
the sweep delay, the doorbell, the new worker taking the lease and replaying.
"""

from __future__ import annotations

import os
import signal
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import section_main, setup_django, summary, wait_for, workers
from .throughput import create_runs, ring_all

LEASE_TTL = 2.0
SWEEP_INTERVAL = 0.5
TICK_SECONDS = 0.02


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django()
    kills = 5 if quick else 30
    log_dir = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    env = {
        "DURABLERUNS_LEASE_TTL": str(LEASE_TTL),
        "DURABLERUNS_SWEEP_INTERVAL": str(SWEEP_INTERVAL),
        "DURABLERUNS_REDELIVER_AFTER": "3",
    }
    from durableruns.models import Run, Step

    recoveries: list[float] = []
    with workers(url, log_dir, **env) as pool:
        procs = {p.pid: p for p in (pool.worker() for _ in range(3))}
        pool.beat()
        pool.wait_ready(list(procs.values()))
        [run_id] = create_runs(
            1,
            "bench-ticker",
            {"ticks": 1_000_000, "seconds": TICK_SECONDS},
            f"rec-{uuid.uuid4().hex[:8]}",
        )
        ring_all([run_id], pool.queue)
        for _ in range(kills):
            pool.wait_ready(list(procs.values()))
            owner_pid = _wait_progressing(run_id, Run, Step)
            victim = procs.pop(owner_pid)
            killed_at = datetime.now(UTC)
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=10)
            replacement = pool.worker()
            procs[replacement.pid] = replacement
            first = wait_for(
                lambda killed_at=killed_at: (
                    Step.objects.filter(run_id=run_id, started_at__gt=killed_at)
                    .order_by("started_at")
                    .values_list("started_at", flat=True)
                    .first()
                ),
                timeout=LEASE_TTL + SWEEP_INTERVAL + 60,
                interval=0.01,
                message="recovery",
            )
            recoveries.append((first - killed_at).total_seconds())
        Run.objects.filter(pk=run_id).update(status=Run.Status.CANCELLED)
    return {
        "lease_ttl_s": LEASE_TTL,
        "sweep_interval_s": SWEEP_INTERVAL,
        "kills": kills,
        "recovery_s": summary(recoveries),
        "target_p95_s": LEASE_TTL + SWEEP_INTERVAL + 1,
        "samples_s": recoveries,
    }


def _wait_progressing(run_id: str, Run: Any, Step: Any) -> int:
    """The pid of the worker holding the lease, once it has committed a few steps."""

    def owner() -> int | None:
        lease_owner, status = (
            Run.objects.filter(pk=run_id).values_list("lease_owner", "status").get()
        )
        if status != Run.Status.RUNNING or not lease_owner:
            return None
        count = Step.objects.filter(run_id=run_id).count()
        return int(lease_owner.split(":")[1]) if count else None

    pid = wait_for(owner, timeout=60, interval=0.01, message="a worker holding the run")
    committed = Step.objects.filter(run_id=run_id).count()
    wait_for(
        lambda: Step.objects.filter(run_id=run_id).count() >= committed + 3,
        timeout=30,
        interval=0.01,
        message="the run to make progress",
    )
    return pid


if __name__ == "__main__":
    section_main(measure)
