"""Worker memory: resident set size of one worker process as it completes runs.

One solo-pool worker (the process that executes the tasks is the one measured)
works through runs of 3 steps (2 compute steps and one effect); its VmRSS is
sampled after each tenth of the runs, so a leak shows as a slope.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .common import rss_bytes, section_main, setup_django, wait_for, workers
from .throughput import count_done, create_runs, ring_all

STEPS_PER_RUN = 3


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django()
    from .agents import create_sink

    create_sink()
    first, total = (100, 400) if quick else (1_000, 10_000)
    # Under load a worker can be slow: stop at a deadline and say how far it got.
    deadline = time.monotonic() + (45 if quick else 420)
    checkpoints = sorted({first, *range(total // 10, total + 1, total // 10)})
    log_dir = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    samples: list[dict[str, Any]] = []
    started = time.perf_counter()
    with workers(url, log_dir) as pool:
        proc = pool.worker()
        pool.wait_ready([proc])
        samples.append({"runs": 0, "rss_mb": rss_bytes(proc.pid) / 2**20})
        prefix = f"mem-{uuid.uuid4().hex[:8]}"
        done = 0
        for mark in checkpoints:
            if time.monotonic() > deadline and done >= first:
                break
            batch = create_runs(
                mark - done, "bench-effect", {"steps": STEPS_PER_RUN}, f"{prefix}-{mark}"
            )
            ring_all(batch, pool.queue)
            done = mark
            wait_for(
                lambda mark=mark: _completed(prefix, mark),
                timeout=900,
                interval=0.1,
                message=f"{mark} runs",
            )
            samples.append({"runs": mark, "rss_mb": rss_bytes(proc.pid) / 2**20})
    by_runs = {s["runs"]: s["rss_mb"] for s in samples}
    reached = samples[-1]["runs"]
    return {
        "steps_per_run": STEPS_PER_RUN,
        "first": first,
        "total": reached,
        "planned_total": total,
        "rss_mb_after_first": by_runs[first],
        "rss_mb_after_total": by_runs[reached],
        "growth_pct": (by_runs[reached] / by_runs[first] - 1) * 100,
        "samples": samples,
        "elapsed_s": time.perf_counter() - started,
    }


def _completed(prefix: str, expected: int) -> bool:
    succeeded, bad = count_done(prefix)
    if bad:
        raise RuntimeError(f"{bad} memory benchmark runs did not succeed")
    return succeeded >= expected


if __name__ == "__main__":
    section_main(measure)
