"""Dashboard at scale: server time and SQL query count of the pages over a big database.

A generator fills a database of its own (`durableruns_bench_dash`, dropped at the
end unless --keep) with RUNS runs (COPY through psycopg), 10 steps per run and one
effect per run (set-based INSERT ... SELECT on the server: no row crosses the wire
or the ORM). Secondary indexes and foreign keys are dropped during the load and
rebuilt after it (foreign keys NOT VALID), as a restore would do; the step and
effect tables are UNLOGGED (no WAL while loading; reading them costs the same).

Pages are requested in-process through Django's test Client (all middleware, a
logged-in operator), so the time is the server's: no network, no browser. The URLs
come from `reverse()` by route name and from the links the pages themselves print,
so the script follows the dashboard as it changes:
- runs list, first page:   reverse("runs")
- runs list, filtered:     reverse("runs") + "?status=failed"
- runs list, deep page:    the page's own rel="next" link (a keyset cursor or a
                           page number), rewritten to point half-way into the data
- run detail:              reverse("run", args=[a run half-way down]), 10 steps
- run detail, 50 steps:    reverse("run", args=["big-run-50-steps"]), 5 effects: the
                           same query count as the 10-step page, or it has an N+1
- effect-key search:       reverse("effects") + "?key=<an idempotency key>"
- runs list, id prefix:    "?q=" the first 11 characters of a run id (100 runs match)
- runs list, input JSON:   "?input=" {"order_id": <one run's>} (1 match) and
                           {"channel": "email"} (a third of the runs match)
- runs list, error text:   "?error=timed out" (1 in 7 failed runs) and "?error=declined"
- run detail, 200 steps:   reverse("run", args=["big-run-200-steps"]), 20 effects
A page whose route or link does not exist in this branch is reported as such.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from .common import db_url, drop_database, libpq_url, section_main, setup_django, summary

STEPS_PER_RUN = 10
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
ID_PATTERN = re.compile(r"gen-\d{10}")
ISO_PATTERN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?")
TABLES = ("durableruns_run", "durableruns_step", "durableruns_effect")
UNLOGGED = ("durableruns_step", "durableruns_effect")


def run_id(i: int) -> str:
    return f"gen-{i:010d}"


def created_at(i: int) -> datetime:
    """Run i was created i seconds after the epoch: newer runs have larger ids."""
    return EPOCH + timedelta(seconds=i)


def status_of(i: int) -> str:
    if i % 1000 == 5:
        return "escalated"
    if i % 100 == 3:
        return "running"
    if i % 50 == 7:
        return "failed"
    return "succeeded"


CHANNELS = ("web", "email", "chat")


def error_of(i: int) -> str | None:
    if status_of(i) != "failed":
        return None
    if i % 7 == 0:
        return f'{{"type": "RetriesExhausted", "message": "provider timed out for A-{i}"}}'
    return f'{{"type": "PermanentError", "message": "card declined for order A-{i}"}}'


def measure(quick: bool) -> dict[str, Any]:
    runs = 20_000 if quick else 1_000_000
    # BENCH_REUSE=1 with --keep: measure a database kept by an earlier run of the same
    # size again, without generating it (minutes) again.
    reuse = bool(os.environ.get("BENCH_REUSE"))
    setup_django("_dash", fresh=not reuse)
    import psycopg

    conn = psycopg.connect(libpq_url(db_url("_dash")), autocommit=True)
    started = time.perf_counter()
    if reuse and _generated(conn, runs):
        generated_in = None
    else:
        generate(conn, runs)
        generated_in = time.perf_counter() - started
    counts = {
        t: conn.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE relname = %s", [t]
        ).fetchone()[0]
        for t in TABLES
    }
    size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    conn.close()
    try:
        pages = measure_pages(runs, 10 if quick else 30)
    finally:
        from django.db import connection

        connection.close()
        if not os.environ.get("BENCH_KEEP"):
            drop_database(db_url("_dash").rsplit("/", 1)[1])
    return {
        "runs": runs,
        "steps": runs * STEPS_PER_RUN,
        "effects": runs,
        "rows_estimated": counts,
        "database_mb": size / 2**20,
        "generated_in_s": generated_in,
        "pages": pages,
    }


# --- The generator ----------------------------------------------------------------


def generate(conn: Any, runs: int) -> None:
    conn.execute("SET maintenance_work_mem = '1GB'")
    dropped = _drop_secondary(conn)
    # No WAL for the 11M history rows: faster, and kinder to a Postgres that others
    # share (reads of an unlogged table cost the same). The database is thrown away.
    for table in UNLOGGED:
        conn.execute(f"ALTER TABLE {table} SET UNLOGGED")
    _copy_runs(conn, runs)
    _insert_steps(
        conn, f"FROM durableruns_run r CROSS JOIN generate_series(0, {STEPS_PER_RUN - 1}) AS p"
    )
    _insert_effects(conn, "FROM durableruns_run r CROSS JOIN (VALUES (5)) AS e(p)")
    _add_big_runs(conn)
    for statement in dropped:
        conn.execute(statement)
    # Vacuum sets the visibility map (index-only scans) where pages list rows; the
    # step table is only read by run, through its index, so statistics suffice.
    for table in TABLES:
        conn.execute(f"{'ANALYZE' if table == 'durableruns_step' else 'VACUUM ANALYZE'} {table}")


def _generated(conn: Any, runs: int) -> bool:
    """Whether a kept database holds a finished generation of `runs` runs (the big run is
    added, and the indexes rebuilt, last)."""
    found = conn.execute(
        "SELECT (SELECT count(*) FROM durableruns_run WHERE id IN (%s, %s)), "
        "(SELECT count(*) FROM durableruns_run WHERE id = %s), "
        "to_regclass('run_created') IS NOT NULL",
        [run_id(runs - 1), HUGE_RUN, run_id(runs)],
    ).fetchone()
    return found == (2, 0, True)


def _drop_secondary(conn: Any) -> list[str]:
    """Drop secondary indexes, unique and foreign keys; return the statements that rebuild them."""
    rebuild: list[str] = []
    for table in TABLES:
        constraints = conn.execute(
            "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype IN ('u', 'f')",
            [table],
        ).fetchall()
        for name, kind, definition in constraints:
            conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            suffix = " NOT VALID" if kind == "f" else ""
            rebuild.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}{suffix}')
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
            [table, table],
        ).fetchall()
        for name, definition in indexes:
            conn.execute(f'DROP INDEX "{name}"')
            rebuild.append(definition)
    # Unique constraints first: a foreign key may need the unique index it references.
    return sorted(rebuild, key=lambda s: "FOREIGN KEY" in s)


def _field_values(model: Any, explicit: dict[str, Any]) -> list[tuple[str, Any]]:
    """(column, value or callable) for every column, so new nullable/defaulted fields work."""
    from django.db import connection
    from django.db.models import NOT_PROVIDED

    columns = []
    for field in model._meta.concrete_fields:
        if field.column in explicit:
            columns.append((field.column, explicit[field.column]))
        elif field.primary_key and field.get_internal_type() in ("AutoField", "BigAutoField"):
            continue
        elif field.db_default is not NOT_PROVIDED:
            continue  # the database fills it (e.g. sealed secrets, empty here)
        elif field.null:
            columns.append((field.column, None))
        elif field.has_default():
            columns.append((field.column, field.get_db_prep_save(field.get_default(), connection)))
        else:
            raise RuntimeError(f"the generator does not know how to fill {field.column}")
    return columns


def _copy_text(value: Any) -> str:
    if value is None:
        return r"\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    text = value.adapted if hasattr(value, "adapted") else value  # psycopg Jsonb
    if not isinstance(text, str):
        import json

        text = json.dumps(text) if isinstance(text, dict | list) else str(text)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _copy_runs(conn: Any, runs: int) -> None:
    from durableruns.models import Run

    explicit = {
        "id": run_id,
        "agent": lambda i: "refund-bot",
        "agent_version": lambda i: "1",
        "input": lambda i: f'{{"order_id": "A-{i}", "channel": "{CHANNELS[i % 3]}"}}',
        "status": status_of,
        "error": error_of,
        "result": lambda i: '{"ok": true}' if status_of(i) == "succeeded" else None,
        "max_steps": lambda i: 20,
        "max_duration_seconds": lambda i: 1800,
        "steps_used": lambda i: STEPS_PER_RUN,
        "fence": lambda i: 1,
        "created_at": lambda i: created_at(i).isoformat(),
        "started_at": lambda i: created_at(i).isoformat(),
        "finished_at": lambda i: (created_at(i) + timedelta(seconds=3)).isoformat(),
        "updated_at": lambda i: (created_at(i) + timedelta(seconds=3)).isoformat(),
    }
    columns = _field_values(Run, explicit)
    names = ", ".join(c for c, _ in columns)
    constant = {c: _copy_text(v) for c, v in columns if not callable(v)}
    copy_sql = f"COPY durableruns_run ({names}) FROM STDIN"
    with conn.cursor() as cursor, cursor.copy(copy_sql) as copy:
        buffer = io.StringIO()
        for i in range(runs):
            buffer.write(
                "\t".join(constant[c] if c in constant else _copy_text(v(i)) for c, v in columns)
            )
            buffer.write("\n")
            if i % 20_000 == 19_999:
                copy.write(buffer.getvalue())
                buffer = io.StringIO()
        copy.write(buffer.getvalue())


def _sql_literal(value: Any) -> str:
    from psycopg.sql import Literal

    return "NULL" if value is None else Literal(_copy_text(value)).as_string(None)


def _insert_select(
    conn: Any, model: Any, table: str, explicit: dict[str, str], source: str
) -> None:
    columns = _field_values(model, explicit)
    names = ", ".join(c for c, _ in columns)
    values = ", ".join(v if c in explicit else _sql_literal(v) for c, v in columns)
    conn.execute(f"INSERT INTO {table} ({names}) SELECT {values} {source}")


def _insert_steps(conn: Any, source: str) -> None:
    from durableruns.models import Step

    _insert_select(
        conn,
        Step,
        "durableruns_step",
        {
            "run_id": "r.id",
            "position": "p",
            "step_id": "p || '-step'",
            "kind": "CASE WHEN p IN (0, 9) THEN 'llm' WHEN p = 5 THEN 'tool' ELSE 'compute' END",
            "name": "'step'",
            "tool": "CASE WHEN p = 5 THEN 'refund' ELSE '' END",
            "fingerprint": "substr(md5(r.id || p), 1, 16)",
            "result": "jsonb_build_object('i', p)",
            "attempts": "1",
            "started_at": "r.created_at + p * interval '100 ms'",
            "finished_at": "r.created_at + p * interval '100 ms' + interval '50 ms'",
            "schema_version": "1",
        },
        source,
    )


def _insert_effects(conn: Any, source: str) -> None:
    from durableruns.models import Effect

    _insert_select(
        conn,
        Effect,
        "durableruns_effect",
        {
            "run_id": "r.id",
            "position": "e.p",
            "idempotency_key": _effect_key_sql("r.id", "e.p"),
            "tool": "'refund'",
            "tool_kind": "'idempotent_write'",
            "fingerprint": "substr(md5(r.id), 1, 16)",
            "args": "jsonb_build_object('run', r.id)",
            "state": "'succeeded'",
            "result": '\'{"refund_id": "re_1"}\'::jsonb',
            "attempts": "1",
            "started_at": "r.created_at + interval '500 ms'",
            "finished_at": "r.created_at + interval '550 ms'",
        },
        source,
    )


def _effect_key_sql(run_column: str, position: str) -> str:
    return (
        f"{run_column} || ':' || {position} || '-refund:refund:' || "
        f"substr(md5({run_column} || {position}), 1, 16)"
    )


BIG_RUN = "big-run-50-steps"
BIG_STEPS = 50
HUGE_RUN = "big-run-200-steps"
HUGE_STEPS = 200


def _add_big_runs(conn: Any) -> None:
    _add_big_run(conn, BIG_RUN, BIG_STEPS)
    _add_big_run(conn, HUGE_RUN, HUGE_STEPS)


def _add_big_run(conn: Any, big_run: str, big_steps: int) -> None:
    """One run with many steps and effects: its page must cost the same number of queries."""
    columns = [
        c
        for (c,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = "
            "'durableruns_run' AND column_name <> 'id' ORDER BY ordinal_position"
        ).fetchall()
    ]
    names = ", ".join(columns)
    conn.execute(
        # Column names come from the catalogue, values are parameters.
        f"INSERT INTO durableruns_run (id, {names}) SELECT %s, {names} "  # noqa: S608
        "FROM durableruns_run WHERE id = %s",
        [big_run, run_id(1)],
    )
    where = f"WHERE r.id = '{big_run}'"
    _insert_steps(
        conn, f"FROM durableruns_run r CROSS JOIN generate_series(0, {big_steps - 1}) AS p {where}"
    )
    _insert_effects(
        conn,
        f"FROM durableruns_run r CROSS JOIN generate_series(5, {big_steps - 1}, "
        f"10) AS e(p) {where}",
    )


# --- The pages --------------------------------------------------------------------


def measure_pages(runs: int, repeats: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from durableruns import roles

    user, _ = get_user_model().objects.get_or_create(username="bench-operator")
    roles.grant(user, roles.OPERATOR)
    from django.test import Client

    client = Client()
    client.force_login(user)
    middle = runs // 2
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idempotency_key FROM durableruns_effect WHERE run_id = %s", [run_id(middle)]
        )
        effect_key = cursor.fetchone()[0]
    urls = _page_urls(client, middle, effect_key)
    return {
        name: (_time_page(client, url, repeats) if url.startswith("/") else {"not_measured": url})
        for name, url in urls.items()
    }


def _reverse(name: str, *args: Any) -> str | None:
    from django.urls import NoReverseMatch, reverse

    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


def _page_urls(client: Any, middle: int, effect_key: str) -> dict[str, str]:
    runs_url = _reverse("runs")
    detail = _reverse("run", run_id(middle))
    effects = _reverse("effects")
    one = f"A-{middle}"
    return {
        "runs_first_page": runs_url or "no route named 'runs'",
        "runs_filtered": f"{runs_url}?status=failed" if runs_url else "no route named 'runs'",
        "runs_deep_page": _deep_url(client, runs_url, middle) if runs_url else "no runs list",
        "run_detail": detail or "no route named 'run'",
        "run_detail_50_steps": _reverse("run", BIG_RUN) or "no route named 'run'",
        "runs_id_prefix": f"{runs_url}?{urlencode({'q': run_id(middle)[:12]})}",
        "runs_input_one": f"{runs_url}?{urlencode({'input': json.dumps({'order_id': one})})}",
        "runs_input_third": f"{runs_url}?{urlencode({'input': json.dumps({'channel': 'email'})})}",
        "runs_error_rare": f"{runs_url}?{urlencode({'error': 'timed out'})}",
        "runs_error_common": f"{runs_url}?{urlencode({'error': 'declined'})}",
        "run_detail_200_steps": _reverse("run", HUGE_RUN) or "no route named 'run'",
        "effect_key_search": (
            f"{effects}?{urlencode({'key': effect_key})}"
            if effects
            else "no route named 'effects' (no effect-key search in this branch)"
        ),
    }


NEXT_LINK = re.compile(
    r'<a\b[^>]*\brel="next"[^>]*>|<a\b[^>]*href="[^"]*(?:cursor|page|after|before)=[^"]*"',
    re.IGNORECASE,
)


def _deep_url(client: Any, runs_url: str, middle: int) -> str:
    """The first page's own next link, rewritten to start half-way into the runs."""
    html = client.get(runs_url).content.decode()
    match = NEXT_LINK.search(html)
    if not match:
        return "no next-page link on the runs list in this branch (no pagination)"
    tag = match.group(0)
    href = re.search(r'href="([^"]*)"', tag).group(1).replace("&amp;", "&")
    query = parse_qsl(urlsplit(href).query, keep_blank_values=True)
    rewritten = [(k, _deeper(k, v, middle)) for k, v in query]
    if rewritten == query:
        return f"could not rewrite the next link {href!r} to a deep page"
    return f"{urlsplit(href).path or runs_url}?{urlencode(rewritten)}"


def _deeper(name: str, value: str, middle: int) -> str:
    """Point a cursor (plain or base64) or a page number at run `middle`."""
    if name in ("page", "p") and value.isdigit():
        return str(max(1, middle // 50))
    replaced = _point_at(value, middle)
    if replaced != value:
        return replaced
    try:
        decoded = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return value
    pointed = _point_at(decoded, middle)
    if pointed == decoded:
        return value
    return base64.urlsafe_b64encode(pointed.encode()).decode().rstrip("=")


def _point_at(text: str, middle: int) -> str:
    text = ID_PATTERN.sub(run_id(middle), text)
    return ISO_PATTERN.sub(created_at(middle).isoformat(), text)


def _time_page(client: Any, url: str, repeats: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(2):  # warm caches, templates and the connection
        client.get(url)
    times, sql_times, query_counts = [], [], set()
    for _ in range(repeats):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            return {"url": url, "not_measured": f"HTTP {response.status_code}"}
        query_counts.add(len(queries))
        # Time inside the database driver: the rest is Python (views, ORM, templates).
        sql_times.append(sum(float(q["time"]) for q in queries.captured_queries) * 1000)
    return {
        "url": url,
        **summary(times),
        "sql_median": summary(sql_times)["median"],
        "slowest_query": max(queries.captured_queries, key=lambda q: float(q["time"]))["sql"][:300],
        "queries": sorted(query_counts),
        "bytes": len(response.content),
    }


if __name__ == "__main__":
    section_main(measure)
