"""Server time of the operator pages with 100,000 runs in the database.

Fills the database named by DATABASE_URL (use a scratch one: it is migrated, and the
rows this script adds stay unless --clean) with RUNS runs (bulk_create in batches,
one effect per run) and one 200-step run with 50 effects, then requests each page
REQUESTS times in-process through Django's test Client (every middleware, a
logged-in operator) and prints the median and p95 in milliseconds. No network and
no browser: this is the server's time, database included.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/durableruns_dashboard_bench \\
        python benchmarks/operator_pages.py [--runs 100000] [--requests 30] [--clean]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")

PREFIX = "bench-"
BIG_RUN = "bench-big-200-steps"
BATCH = 5_000
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = (
    ["succeeded"] * 40
    + ["failed"] * 4
    + ["running", "waiting", "cancelled", "escalated", "queued", "awaiting_approval"]
)


def _setup() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def fill(runs: int) -> None:
    """Bulk-create the runs and effects that are not there yet (reruns are cheap)."""
    from durableruns.models import Effect, Run

    have = Run.objects.filter(id__startswith=PREFIX).exclude(pk=BIG_RUN).count()
    started = time.perf_counter()
    for start in range(have, runs, BATCH):
        stop = min(start + BATCH, runs)
        Run.objects.bulk_create([_run(i) for i in range(start, stop)])
        Effect.objects.bulk_create([_effect(i) for i in range(start, stop)])
    if have < runs:
        # auto_now_add overrode created_at: spread the runs one second apart again.
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE durableruns_run SET created_at = %s + "
                "(substr(id, 7)::int * interval '1 second') "
                "WHERE id LIKE 'bench-0%%'",
                [EPOCH],
            )
            cursor.execute("ANALYZE")
        print(f"created {runs - have} runs and effects in {time.perf_counter() - started:.1f} s")
    _big_run()


def _run(i: int):
    from durableruns.models import Run

    return Run(
        id=f"{PREFIX}{i:08d}",
        agent=("refund-bot", "research-bot")[i % 2],
        agent_version=str(1 + i % 3),
        input={"order_id": f"A-{i}"},
        status=STATUSES[i % len(STATUSES)],
        max_steps=30,
        max_duration_seconds=1800,
        steps_used=5,
        started_at=EPOCH,
        finished_at=EPOCH + timedelta(seconds=9),
    )


def _effect(i: int):
    from durableruns.models import Effect

    state = "unknown" if STATUSES[i % len(STATUSES)] == "escalated" else "succeeded"
    return Effect(
        run_id=f"{PREFIX}{i:08d}",
        position=2,
        idempotency_key=f"{PREFIX}{i:08d}:2-refund:refund:{i:016x}",
        tool="refund",
        tool_kind="idempotent_write",
        fingerprint=f"{i:016x}",
        args={"order_id": f"A-{i}", "cents": 1200},
        state=state,
        result={"refund_id": f"rf_{i}"},
        started_at=EPOCH + timedelta(seconds=i),
    )


def _big_run() -> None:
    from durableruns.models import Effect, Run, Step

    if Run.objects.filter(pk=BIG_RUN).exists():
        return
    run = Run.objects.create(
        id=BIG_RUN,
        agent="research-bot",
        agent_version="1",
        input={},
        status="succeeded",
        max_steps=300,
        max_duration_seconds=3600,
        steps_used=200,
        started_at=EPOCH,
        leases_taken=3,
        finished_at=EPOCH + timedelta(seconds=200),
    )
    kinds = ["llm", "tool", "compute", "tool"]
    Step.objects.bulk_create(
        [
            Step(
                run=run,
                position=p,
                step_id=f"{p}-s{p}",
                kind=kinds[p % 4],
                name=f"s{p}",
                input={"messages": [{"role": "user", "content": "x" * 200}]},
                result={"content": "y" * 400},
                started_at=EPOCH + timedelta(seconds=p),
                finished_at=EPOCH + timedelta(seconds=p, milliseconds=700),
                lease_number=1 + p // 80,
                executed_by="bench-host:1:abcd",
            )
            for p in range(200)
        ]
    )
    Effect.objects.bulk_create(
        [
            Effect(
                run=run,
                position=p,
                idempotency_key=f"{BIG_RUN}:{p}-refund:refund:{p:016x}",
                tool="refund",
                tool_kind="idempotent_write",
                fingerprint=f"{p:016x}",
                args={"n": p},
                state="succeeded",
                result={"ok": p},
                started_at=EPOCH + timedelta(seconds=p),
            )
            for p in range(1, 200, 4)
        ]
    )


def clean() -> None:
    from durableruns.models import Run

    deleted, _ = Run.objects.filter(id__startswith=PREFIX).delete()
    print(f"deleted {deleted} rows")


def measure(requests: int) -> list[tuple[str, float, float, int]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    from durableruns import roles

    user, _ = get_user_model().objects.get_or_create(username="bench-operator")
    roles.ensure_groups()
    roles.grant(user, roles.OPERATOR)
    client = Client()
    client.force_login(user)
    middle = f"{PREFIX}{50_000:08d}:2-refund:refund:{50_000:016x}"
    first = client.get(reverse("runs"))
    pages = {
        "runs list, first page": reverse("runs"),
        "runs list, status=failed": reverse("runs") + "?status=failed",
        "runs list, next page (keyset)": reverse("runs") + _next_link(first),
        "runs list, search by idempotency key": reverse("runs") + f"?q={middle}",
        "run detail, 200 steps": reverse("run", args=[BIG_RUN]),
        "effect ledger, first page": reverse("effects"),
        "effect ledger, exact key": reverse("effects") + f"?key={middle}",
        "escalation queue": reverse("escalations"),
    }
    rows = []
    for name, url in pages.items():
        assert client.get(url).status_code == 200, url  # warm up; fail loudly
        timings = []
        for _ in range(requests):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        timings.sort()
        p95 = timings[max(0, round(0.95 * len(timings)) - 1)]
        rows.append((name, statistics.median(timings), p95, len(queries)))
    return rows


def _next_link(response) -> str:
    """The page's own rel="next" link (a keyset cursor)."""
    import html
    import re

    found = re.search(r'href="([^"]+)" rel="next"', response.content.decode())
    assert found, "the runs list has no next page"
    return html.unescape(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--clean", action="store_true", help="delete the bench rows and exit")
    args = parser.parse_args()
    _setup()
    if args.clean:
        clean()
        return
    fill(args.runs)
    from durableruns.models import Run

    print(f"{Run.objects.count()} runs in the database; {args.requests} requests per page")
    print(f"{'page':40} {'median ms':>10} {'p95 ms':>8} {'queries':>8}")
    for name, median, p95, queries in measure(args.requests):
        print(f"{name:40} {median:10.1f} {p95:8.1f} {queries:8d}")


if __name__ == "__main__":
    main()
