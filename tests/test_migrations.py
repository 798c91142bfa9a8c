"""One straight migration line: 0001_initial plus the audit trigger, nothing pending."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_the_models_need_no_new_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_history_is_one_straight_line():
    names = sorted(p.stem for p in (ROOT / "durableruns" / "migrations").glob("0*.py"))
    numbers = [name[:4] for name in names]
    assert numbers == [f"{n:04d}" for n in range(1, len(names) + 1)], names


def test_a_fresh_sqlite_database_migrates(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.django_db
def test_payload_columns_are_compressed_with_lz4_on_postgres():
    """0011: a 2 KB or larger payload is compressed with LZ4, not pglz, on every table
    the write path fills (section 1b of docs/benchmarks.md has the cost of each)."""
    import importlib

    from django.db import connection

    columns = importlib.import_module("durableruns.migrations.0011_lz4_payloads").COLUMNS

    if connection.vendor != "postgresql":
        pytest.skip("column compression is a Postgres setting")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attrelid::regclass::text, attname, attcompression FROM pg_attribute "
            "WHERE attrelid::regclass::text = ANY(%s) AND attnum > 0 AND NOT attisdropped",
            [list(columns)],
        )
        found = {(table, column): method for table, column, method in cursor.fetchall()}
    wanted = [(t, c) for t, names in columns.items() for c in names]
    assert {key: found.get(key) for key in wanted} == dict.fromkeys(wanted, "l")


@pytest.mark.django_db
def test_a_checkpoint_writes_no_index_it_does_not_need():
    """Every full index on the step table is written on every checkpoint: the key and
    the (run, position) constraint, which also serves lookups by run (0012). The one
    partial index holds waiting steps only (0023), so other checkpoints never write it."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("reads pg_indexes")
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "durableruns_step")
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'durableruns_step' "
            "AND indexdef LIKE '%% WHERE %%'"
        )
        partial = dict(cursor.fetchall())
    indexed = sorted(
        tuple(c["columns"])
        for name, c in constraints.items()
        if (c["index"] or c["unique"]) and name not in partial
    )
    assert indexed == [("id",), ("run_id", "position")]
    assert list(partial) == ["step_run_waits"]
    assert "'approval'" in partial["step_run_waits"] and "'tool'" not in partial["step_run_waits"]


@pytest.mark.django_db
def test_only_the_unfenced_langgraph_table_keeps_its_foreign_key_check():
    """Checkpoints and blobs are inserted under the fence (a lock on their Run), so the
    database's check of their thread, which locked the thread row again at every
    checkpoint, is gone (0013). A task's plain writes are not fenced: theirs stays."""
    from django.db import connection

    def foreign_keys(table: str) -> list[tuple[str, ...]]:
        with connection.cursor() as cursor:
            constraints = connection.introspection.get_constraints(cursor, table)
        return [tuple(c["columns"]) for c in constraints.values() if c["foreign_key"]]

    assert foreign_keys("durableruns_langgraphcheckpoint") == []
    assert foreign_keys("durableruns_langgraphblob") == []
    assert foreign_keys("durableruns_langgraphthread") == []  # inserted with its Run
    assert foreign_keys("durableruns_langgraphwrite") == [("thread_id",)]


@pytest.mark.django_db
def test_no_pattern_index_is_written_that_no_query_uses():
    """No LIKE is run on a Run's parent or a thread's Run id: their varchar_pattern_ops
    twins were written at every new run and thread for nothing (0013)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("varchar_pattern_ops is Postgres's")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE indexdef LIKE %s "
            "AND tablename LIKE 'durableruns%%'",
            ["%varchar_pattern_ops%"],
        )
        twins = sorted(t for t, d in cursor.fetchall() if "parent_id" in d or "thread" in t)
    assert twins == []
