"""The run page of a 10,000-step run that is still running (issues 24 and 27).

Server time (median of REQUESTS, in-process through Django's test Client with every
middleware, a logged-in operator), bytes sent and SQL queries of:
- the first render of the page;
- an unchanged live poll (htmx, X-Live-Version of what the page shows): a 204;
- a changed poll: one new step appended between polls, the partial the page swaps in
  (the live-update bytes);
- the floor: the same unchanged poll of a one-step run, interleaved with the long
  run's polls so that both see the same load, and the ratio of the two.

    .venv/bin/python -m benchmarks.long_run_page [--quick] [--json FILE]

Quick: 2,000 steps, 15 requests; full: 10,000 steps, 30. The runs live in a bench
database of their own (`durableruns_bench_long`).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from .common import section_main, setup_django

RUN = "bench-long-run"
SHORT = "bench-short-run"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SIZES = {"quick": (2_000, 15), "full": (10_000, 30)}
VERSION = re.compile(r'"X-Live-Version": "([0-9a-f]+)"')
# What the page shows (web/live_rows.py); a changed poll that sends only what changed
# leaves both headers for the next poll in #run-live-next, which comes first here.
ROWS = re.compile(r'"X-Live-Rows": "([0-9a-f-]*)"')


def measure(quick: bool) -> dict[str, Any]:
    steps, requests = SIZES["quick" if quick else "full"]
    setup_django("_long")
    from django.contrib.auth import get_user_model
    from django.test import Client

    from durableruns import roles

    _long_run(steps)
    _short_run()
    user, _ = get_user_model().objects.get_or_create(username="bench-operator")
    roles.grant(user, roles.OPERATOR)
    client = Client()
    client.force_login(user)
    load_before = os.getloadavg()
    page = _repeat(client, _url(RUN), {}, requests)
    poll, floor = _interleaved(client, requests)
    changed = _changed_polls(client, steps, requests)
    return {
        "steps": steps,
        "requests": requests,
        "first_render": page,
        "unchanged_poll": poll,
        "changed_poll": changed,
        "floor_poll": floor,
        "poll_ratio_to_floor": poll["median"] / floor["median"],
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }


def _url(run: str) -> str:
    from django.urls import reverse

    return reverse("run", args=[run])


def _poll_headers(client: Any, run: str) -> dict[str, str]:
    """What the page's live region sends: the version it was rendered at, and the rows
    it shows."""
    return _next_headers(client.get(_url(run)).content.decode())


def _next_headers(body: str) -> dict[str, str]:
    version, rows = VERSION.search(body), ROWS.search(body)
    return {
        "HX-Request": "true",
        "X-Live-Version": version.group(1) if version else "",
        "X-Live-Rows": rows.group(1) if rows else "",
    }


def _get(client: Any, url: str, headers: dict[str, str]) -> tuple[float, Any]:
    started = time.perf_counter()
    response = client.get(url, headers=headers)
    return (time.perf_counter() - started) * 1000, response


def _answer(times: list[float], response: Any, queries: tuple[int, float]) -> dict[str, Any]:
    """The median, the last answer's size (body, and headers as they go on the wire) and
    the SQL of one more request: how many queries, and the time inside the driver."""
    return {
        "median": statistics.median(times),
        "min": min(times),
        "n": len(times),
        "status": response.status_code,
        "bytes": len(response.content),
        "header_bytes": len(response.serialize_headers()),
        "queries": queries[0],
        "sql_ms": queries[1],
    }


def _queries(client: Any, url: str, headers: dict[str, str]) -> tuple[int, float]:
    """The SQL of one more request, apart from the timed ones (the capture turns on the
    debug cursor, which costs time)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(url, headers=headers)
    return len(captured), sum(float(q["time"]) for q in captured.captured_queries) * 1000


def _repeat(client: Any, url: str, headers: dict[str, str], requests: int) -> dict[str, Any]:
    client.get(url, headers=headers)  # warm templates, caches and the connection
    times, response = [], None
    for _ in range(requests):
        ms, response = _get(client, url, headers)
        times.append(ms)
    return _answer(times, response, _queries(client, url, headers))


def _interleaved(client: Any, requests: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The long run's unchanged poll and the one-step run's, one after the other."""
    runs = {run: (_url(run), _poll_headers(client, run)) for run in (RUN, SHORT)}
    times: dict[str, list[float]] = {run: [] for run in runs}
    last: dict[str, Any] = {}
    for _ in range(requests):
        for run, (url, headers) in runs.items():
            ms, last[run] = _get(client, url, headers)
            times[run].append(ms)
    poll, floor = (
        _answer(times[run], last[run], _queries(client, url, headers))
        for run, (url, headers) in runs.items()
    )
    return poll, floor


def _changed_polls(client: Any, steps: int, requests: int) -> dict[str, Any]:
    """A poll after one new step: what the page swaps in (a 200 partial: the new row and
    what else changed, or the whole live region)."""
    url, headers = _url(RUN), _poll_headers(client, RUN)
    times, response = [], None
    for position in range(steps, steps + requests):
        _append(position)
        ms, response = _get(client, url, headers)
        times.append(ms)
        headers = _next_headers(response.content.decode())
    _append(steps + requests)
    return _answer(times, response, _queries(client, url, headers))


def _append(position: int) -> None:
    """The next step of the long run, committed as the engine would (run row and step)."""
    from django.db.models import F

    from durableruns.models import Run

    Run.objects.filter(pk=RUN).update(steps_used=F("steps_used") + 1)
    _step(RUN, position).save()


def _step(run: str, position: int) -> Any:
    from durableruns.models import Step

    return Step(
        run_id=run,
        position=position,
        step_id=f"{position}-lookup",
        kind="tool",
        name="lookup_order",
        input={"order_id": f"A-{position}"},
        result={"id": f"A-{position}", "cents": position},
        started_at=EPOCH + timedelta(seconds=position),
        finished_at=EPOCH + timedelta(seconds=position, milliseconds=5),
    )


def _new_run(run: str, steps: int) -> Any:
    from durableruns.models import Run

    Run.objects.filter(pk=run).delete()
    return Run.objects.create(
        id=run,
        agent="refund-bot",
        agent_version="1",
        input={"order_id": "A-1"},
        status=Run.Status.RUNNING,
        max_steps=steps + 1_000,
        max_duration_seconds=86_400,
        steps_used=steps,
        started_at=EPOCH,
    )


def _long_run(steps: int) -> None:
    """A running run of `steps` tool steps, one effect every fifth step."""
    from durableruns.models import Effect, Step

    run = _new_run(RUN, steps)
    Step.objects.bulk_create((_step(RUN, p) for p in range(steps)), batch_size=2_000)
    Effect.objects.bulk_create(
        (
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
        ),
        batch_size=2_000,
    )


def _short_run() -> None:
    _new_run(SHORT, 1)
    _step(SHORT, 0).save()


if __name__ == "__main__":
    section_main(measure)
