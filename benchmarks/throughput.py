"""Throughput: completed steps/s and runs/s with 1, 2 and 4 real Celery worker processes.

Runs have 10 steps, the last an idempotent write through the effect ledger to a
local table (benchmarks.agents.bench_sink). The runs are created in bulk and their
doorbells rung at once, so the clock measures the workers, not the enqueuing.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .common import section_main, setup_django, wait_for, workers

STEPS_PER_RUN = 10


def create_runs(count: int, agent: str, run_input: dict[str, Any], prefix: str) -> list[str]:
    """Queued runs created in one INSERT, as start_run would leave them (doorbell not rung)."""
    from django.db.models.functions import Now

    from durableruns.engine import registry
    from durableruns.models import Run

    max_steps = registry.get_agent(agent, "1").max_steps or 1_000
    runs = [
        Run(
            id=f"{prefix}-{i:06d}",
            agent=agent,
            agent_version="1",
            input=run_input,
            max_steps=max_steps,
            max_duration_seconds=3600,
            rang_at=Now(),
        )
        for i in range(count)
    ]
    Run.objects.bulk_create(runs, batch_size=1000)
    return [run.id for run in runs]


def ring_all(run_ids: list[str], queue: str) -> None:
    from durableruns.tasks import advance_run

    for run_id in run_ids:
        advance_run.apply_async((run_id,), queue=queue)


def count_done(run_ids: list[str] | str) -> tuple[int, int]:
    """(succeeded, failed or other terminal) among the runs, by id list or id prefix."""
    from durableruns.models import Run

    runs = (
        Run.objects.filter(id__startswith=run_ids)
        if isinstance(run_ids, str)
        else Run.objects.filter(pk__in=run_ids)
    )
    succeeded = runs.filter(status=Run.Status.SUCCEEDED).count()
    bad = runs.filter(
        status__in=[Run.Status.FAILED, Run.Status.CANCELLED, Run.Status.ESCALATED]
    ).count()
    return succeeded, bad


def drive(run_ids: list[str], queue: str, timeout: float) -> float:
    """Ring every run and wait until all succeeded; returns the elapsed seconds."""
    started = time.perf_counter()
    ring_all(run_ids, queue)

    def all_done() -> bool:
        succeeded, bad = count_done(run_ids)
        if bad:
            raise RuntimeError(f"{bad} benchmark runs did not succeed")
        return succeeded == len(run_ids)

    wait_for(all_done, timeout=timeout, interval=0.05, message=f"{len(run_ids)} runs")
    return time.perf_counter() - started


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django()
    from .agents import create_sink

    create_sink()
    runs_per_config = 40 if quick else 200
    log_dir = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    results = []
    for processes in (1, 2, 4):
        with workers(url, log_dir) as pool:
            procs = [pool.worker() for _ in range(processes)]
            pool.wait_ready(procs)
            prefix = f"tp{processes}-{uuid.uuid4().hex[:8]}"
            run_input = {"steps": STEPS_PER_RUN}
            warm = create_runs(processes * 2, "bench-effect", run_input, prefix + "-warm")
            drive(warm, pool.queue, timeout=120)
            run_ids = create_runs(runs_per_config, "bench-effect", run_input, prefix)
            elapsed = drive(run_ids, pool.queue, timeout=600)
        results.append(
            {
                "processes": processes,
                "runs": runs_per_config,
                "elapsed_s": elapsed,
                "runs_per_s": runs_per_config / elapsed,
                "steps_per_s": runs_per_config * STEPS_PER_RUN / elapsed,
            }
        )
    return {"steps_per_run": STEPS_PER_RUN, "effects_per_run": 1, "configs": results}


if __name__ == "__main__":
    section_main(measure)
