"""A team-sized database for the dashboard load benchmark (issue 27): RUNS runs, of which
PENDING wait on an approval and the rest succeeded with DECIDED decided approvals between
them, plus VIEWED running runs of 50 steps that the run-page viewers watch.

Set-based INSERT ... SELECT on the server (no row crosses the wire), then VACUUM ANALYZE,
so the plans are the ones a real database of that size gets.
"""

from __future__ import annotations

from typing import Any

from .dashboard import _insert_select, _insert_steps

WATCHED_STEPS = 50


def watched_run(i: int) -> str:
    return f"team-watched-{i:04d}"


def seed(conn: Any, *, runs: int, pending: int, decided: int, watched: int) -> None:
    from durableruns.models import Approval, Run

    _insert_select(
        conn,
        Run,
        "durableruns_run",
        _run_columns(pending),
        f"FROM generate_series(0, {runs - 1}) AS i",
    )
    # Pending: one on each of the first `pending` runs; decided: one on every other run,
    # then a second one on the first runs after those until there are `decided`.
    _insert_select(
        conn,
        Approval,
        "durableruns_approval",
        _approval_columns("pending"),
        f"FROM generate_series(0, {pending - 1}) AS i, (VALUES (0)) AS p(n)",
    )
    first = min(decided, runs - pending)
    second = decided - first
    _insert_select(
        conn,
        Approval,
        "durableruns_approval",
        _approval_columns("approved"),
        f"FROM generate_series({pending}, {runs - 1}) AS i, (VALUES (0)) AS p(n) "
        f"WHERE i < {pending + first}",
    )
    if second:
        _insert_select(
            conn,
            Approval,
            "durableruns_approval",
            _approval_columns("approved"),
            f"FROM generate_series({pending}, {pending + second - 1}) AS i, (VALUES (1)) AS p(n)",
        )
    for i in range(watched):
        _watched(conn, watched_run(i))
    for table in ("durableruns_run", "durableruns_approval", "durableruns_step"):
        conn.execute(f"VACUUM ANALYZE {table}")


def _run_columns(pending: int) -> dict[str, str]:
    return {
        "id": "'team-' || lpad(i::text, 7, '0')",
        "agent": "CASE WHEN i % 2 = 0 THEN 'refund-bot' ELSE 'research-bot' END",
        "agent_version": "'1'",
        "input": "jsonb_build_object('order_id', 'A-' || i)",
        "status": f"CASE WHEN i < {pending} THEN 'awaiting_approval' ELSE 'succeeded' END",
        "max_steps": "40",
        "max_duration_seconds": "1800",
        "steps_used": "3",
        "fence": "1",
        "created_at": "timestamptz '2026-01-01' + i * interval '1 second'",
        "updated_at": "timestamptz '2026-01-01' + i * interval '1 second'",
    }


def _approval_columns(state: str) -> dict[str, str]:
    columns = {
        "run_id": "'team-' || lpad(i::text, 7, '0')",
        "position": "p.n",
        "name": "'approve-refund'",
        "summary": "'Refund order A-' || i",
        "payload": "jsonb_build_object('order_id', 'A-' || i, 'cents', 12000)",
        "allowed": """'["approve", "reject"]'::jsonb""",
        "state": f"'{state}'",
        "created_at": "timestamptz '2026-01-01' + i * interval '1 second'",
    }
    if state != "pending":
        columns |= {
            "decision": "'approve'",
            "decider_name": "'bench'",
            "decided_at": "timestamptz '2026-01-01 00:01' + i * interval '1 second'",
        }
    return columns


def _watched(conn: Any, run: str) -> None:
    """A running run of WATCHED_STEPS steps (a viewer's page; the load adds steps to it)."""
    from durableruns.models import Run

    columns = _run_columns(0) | {
        "id": f"'{run}'",
        "status": "'running'",
        "steps_used": str(WATCHED_STEPS),
        "started_at": "now()",
        "created_at": "now()",
        "updated_at": "now()",
    }
    _insert_select(conn, Run, "durableruns_run", columns, "FROM (VALUES (0)) AS v(i)")
    _insert_steps(
        conn,
        f"FROM durableruns_run r CROSS JOIN generate_series(0, {WATCHED_STEPS - 1}) AS p "
        f"WHERE r.id = '{run}'",
    )
