"""The run page of a 10,000-step run that is still running (issue 27): first render and
a live poll when nothing changed, server time (median of REQUESTS, in-process through
Django's test Client with every middleware, a logged-in operator) and bytes sent.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/durableruns_bench_long \\
        python benchmarks/long_run_page.py [--steps 10000] [--requests 30]

Run it from the checkout to measure (it imports `durableruns` from the working
directory, so the same script measures another checkout's code too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")

RUN = "bench-long-run"
SHORT = "bench-short-run"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _setup(steps: int):  # type: ignore[no-untyped-def]
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User

    from durableruns import roles
    from durableruns.models import Effect, Run, Step

    Run.objects.filter(pk=RUN).delete()
    run = Run.objects.create(
        id=RUN,
        agent="refund-bot",
        agent_version="1",
        input={"order_id": "A-1"},
        status=Run.Status.RUNNING,
        max_steps=steps + 10,
        max_duration_seconds=86_400,
        steps_used=steps,
        started_at=EPOCH,
    )
    Step.objects.bulk_create(
        Step(
            run=run,
            position=p,
            step_id=f"{p}-lookup",
            kind="tool",
            name="lookup_order",
            input={"order_id": f"A-{p}"},
            result={"id": f"A-{p}", "cents": p},
            started_at=EPOCH + timedelta(seconds=p),
            finished_at=EPOCH + timedelta(seconds=p, milliseconds=5),
        )
        for p in range(steps)
    )
    Effect.objects.bulk_create(
        Effect(
            run=run,
            position=p,
            idempotency_key=f"{RUN}:{p}",
            tool="lookup_order",
            tool_kind="read_only",
            fingerprint="0" * 16,
            args={"order_id": f"A-{p}"},
            state="succeeded",
            started_at=EPOCH,
            finished_at=EPOCH,
        )
        for p in range(0, steps, 5)
    )
    user, _ = User.objects.get_or_create(username="bench-operator")
    roles.grant(user, roles.OPERATOR)
    return user


def _short_run() -> str:
    from durableruns.models import Run, Step

    Run.objects.filter(pk=SHORT).delete()
    run = Run.objects.create(
        id=SHORT,
        agent="refund-bot",
        agent_version="1",
        input={},
        status=Run.Status.RUNNING,
        max_steps=10,
        max_duration_seconds=600,
        steps_used=1,
        started_at=EPOCH,
    )
    Step.objects.create(
        run=run,
        position=0,
        step_id="0-lookup",
        kind="tool",
        name="lookup_order",
        started_at=EPOCH,
        finished_at=EPOCH,
    )
    return SHORT


def _measure(client, headers, requests: int, run: str = RUN) -> tuple[float, int, int]:  # type: ignore[no-untyped-def]
    times, size, status = [], 0, 0
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(f"/runs/{run}/", headers=headers)
        times.append((time.perf_counter() - started) * 1000)
        size, status = len(response.content), response.status_code
    return statistics.median(times), size, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    user = _setup(args.steps)
    import re

    from django.test import Client

    client = Client()
    client.force_login(user)
    page_ms, page_bytes, _ = _measure(client, {}, args.requests)
    body = client.get(f"/runs/{RUN}/").content.decode()
    found = re.search(r'"X-Live-Version": "([0-9a-f]+)"', body)
    poll = {"HX-Request": "true", "X-Live-Version": found.group(1) if found else ""}
    poll_ms, poll_bytes, poll_status = _measure(client, poll, args.requests)
    # The floor, measured in the same run: the same poll of a one-step run.
    short = _short_run()
    body = client.get(f"/runs/{short}/").content.decode()
    found = re.search(r'"X-Live-Version": "([0-9a-f]+)"', body)
    floor = {"HX-Request": "true", "X-Live-Version": found.group(1) if found else ""}
    floor_ms, _, _ = _measure(client, floor, args.requests, short)
    print(f"{args.steps}-step running run, median of {args.requests}:")
    print(f"  first render   {page_ms:8.1f} ms  {page_bytes:>10,} bytes")
    print(f"  unchanged poll {poll_ms:8.1f} ms  {poll_bytes:>10,} bytes  (HTTP {poll_status})")
    print(
        f"  the same poll of a 1-step run (floor) {floor_ms:.1f} ms: ratio {poll_ms / floor_ms:.2f}"
    )


if __name__ == "__main__":
    main()
