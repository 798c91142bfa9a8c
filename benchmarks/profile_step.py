"""Where a step's client time goes: `python -m benchmarks.profile_step [--size S] [--runs N]`.

Profiles the real executor (in-process, Postgres) with cProfile on a CPU clock, so
time spent waiting for the database or for other processes is left out, and prints
the client CPU per step of the engine and of the raw-INSERT floor.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
import uuid
from typing import Any

from .common import libpq_url, setup_django
from .step_overhead import Floor
from .step_sizes import SIZES


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_step")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="cumulative", help="pstats order, e.g. tottime")
    parser.add_argument(
        "--size", choices=("trivial", "2KB", "20KB"), help="each step returns step_sizes' payload"
    )
    args = parser.parse_args()
    url = setup_django()
    payload = None if args.size is None else SIZES[args.size]
    _advance(args.steps, payload)  # warm up
    started = time.process_time()
    for _ in range(args.runs):
        _advance(args.steps, payload)
    engine_cpu = (time.process_time() - started) / (args.runs * args.steps)
    floor = Floor(libpq_url(url))
    started = time.process_time()
    floor.round(autocommit=True)
    floor_cpu = (time.process_time() - started) / 100
    floor.close()
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    for _ in range(args.runs):
        _advance(args.steps, payload)
    profile.disable()
    pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    print(
        f"client CPU per step (unprofiled): engine {engine_cpu * 1000:.3f} ms, "
        f"floor {floor_cpu * 1000:.3f} ms; the profiler's own overhead inflates its times"
    )


def _advance(steps: int, payload: Any = None) -> None:
    from django.db.models.functions import Now

    from durableruns.engine import executor
    from durableruns.models import Run

    run = Run.objects.create(
        id=f"profile-{uuid.uuid4().hex}",
        agent="bench-trivial" if payload is None else "bench-payload",
        agent_version="1",
        input={"steps": steps} if payload is None else {"steps": steps, "payload": payload},
        max_steps=100_000,
        max_duration_seconds=3600,
        rang_at=Now(),
    )
    if executor.advance(run.id) != "succeeded":
        raise RuntimeError(f"run {run.id} did not succeed")


if __name__ == "__main__":
    main()
