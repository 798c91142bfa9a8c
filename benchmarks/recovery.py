"""Recovery: SIGKILL the worker that holds a run's lease; time until its next step starts.

Three solo-pool workers run (their sweeper threads elect one sweep leader; no beat).
The run ticks through short steps; the benchmark kills whichever worker holds the lease
(its pid is in `lease_owner`), starts a replacement, and measures from the kill to the
`started_at` of the first step that began after it (same host clock). It includes the
dead-owner detection (or the rest of the lease), the doorbell, the new worker taking
the lease and replaying.

Two paths are measured:
- `defaults`: production lease TTL and sweep interval (30 s, 5 s), with the dead-owner
  detection (a free advisory lock) on: the path every deployment gets;
- `lease_expiry`: the detection off (DURABLERUNS_DEAD_OWNER_DETECTION=0, as behind a
  transaction-mode pooler), so only the lease TTL hands the run over. It uses a 2 s
  lease and a 0.5 s sweep (a 30 s lease would take ~35 s a kill); with production
  defaults expect about TTL + sweep interval = 30-35 s, which `lease_expiry_defaults`
  confirms on a few kills.
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

TICK_SECONDS = 0.02
PATHS = {
    # name: (lease TTL, sweep interval, dead-owner detection, kills, quick kills)
    "defaults": (30.0, 5.0, True, 20, 5),
    "lease_expiry": (2.0, 0.5, False, 20, 5),
    "lease_expiry_defaults": (30.0, 5.0, False, 3, 0),
}


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django()
    results = {}
    for name, (ttl, sweep, detection, kills, quick_kills) in PATHS.items():
        count = quick_kills if quick else kills
        if count:
            results[name] = _measure_path(url, ttl, sweep, detection, count)
    defaults = results["defaults"]
    return {**defaults, "paths": results, "target_p95_s": 2.0}


def _measure_path(url: str, ttl: float, sweep: float, detection: bool, kills: int) -> dict:
    log_dir = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    env = {
        "DURABLERUNS_LEASE_TTL": str(ttl),
        "DURABLERUNS_SWEEP_INTERVAL": str(sweep),
        "DURABLERUNS_DEAD_OWNER_DETECTION": "1" if detection else "0",
        "DURABLERUNS_REDELIVER_AFTER": "3",
    }
    from durableruns.models import Run, Step

    recoveries: list[float] = []
    with workers(url, log_dir, **env) as pool:
        procs = {p.pid: p for p in (pool.worker() for _ in range(3))}
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
                timeout=ttl + sweep + 60,
                interval=0.01,
                message="recovery",
            )
            recoveries.append((first - killed_at).total_seconds())
        Run.objects.filter(pk=run_id).update(status=Run.Status.CANCELLED)
    return {
        "lease_ttl_s": ttl,
        "sweep_interval_s": sweep,
        "dead_owner_detection": detection,
        "kills": kills,
        "recovery_s": {**summary(recoveries), "max": max(recoveries)},
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
