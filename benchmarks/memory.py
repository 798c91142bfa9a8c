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

from .common import rss_bytes, section_main, setup_django, workers
from .throughput import count_done, create_runs, ring_all

STEPS_PER_RUN = 3


def measure(quick: bool) -> dict[str, Any]:
    url = setup_django()
    from .agents import create_sink

    create_sink()
    first, total = (100, 400) if quick else (1_000, 10_000)
    marks = sorted({first, *range(total // 10, total + 1, total // 10)})
    log_dir = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    samples: list[dict[str, Any]] = []
    started = time.perf_counter()
    with workers(url, log_dir) as pool:
        proc = pool.worker()
        pool.wait_ready([proc])
        samples.append({"runs": 0, "rss_mb": rss_bytes(proc.pid) / 2**20})
        prefix = f"mem-{uuid.uuid4().hex[:8]}"
        ring_all(create_runs(total, "bench-effect", {"steps": STEPS_PER_RUN}, prefix), pool.queue)
        # Under load a worker can be slow: stop at a deadline and say how far it got.
        deadline = time.monotonic() + (45 if quick else 300)
        while marks:
            done = _completed(prefix)
            if done >= marks[0] or (time.monotonic() > deadline and done >= first):
                samples.append({"runs": done, "rss_mb": rss_bytes(proc.pid) / 2**20})
                marks = [m for m in marks if m > done]
                if time.monotonic() > deadline:
                    break
            time.sleep(0.2)
    after_first = next(s for s in samples if s["runs"] >= first)
    last = samples[-1]
    return {
        "steps_per_run": STEPS_PER_RUN,
        "first": after_first["runs"],
        "total": last["runs"],
        "planned_total": total,
        "rss_mb_after_first": after_first["rss_mb"],
        "rss_mb_after_total": last["rss_mb"],
        "growth_pct": (last["rss_mb"] / after_first["rss_mb"] - 1) * 100,
        "samples": samples,
        "elapsed_s": time.perf_counter() - started,
    }


def _completed(prefix: str) -> int:
    succeeded, bad = count_done(prefix)
    if bad:
        raise RuntimeError(f"{bad} memory benchmark runs did not succeed")
    return succeeded


if __name__ == "__main__":
    section_main(measure)
