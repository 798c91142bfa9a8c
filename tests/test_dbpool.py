"""The workers' pool (durableruns/dbpool.py): a connection is checked before reuse only
after it sat unused, against a real Postgres and a real psycopg pool."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from durableruns import dbpool
from tests.conftest import database_dsn, terminate_backends


@pytest.fixture
def pool(db):
    options = {"min_size": 1, "max_size": 1, "kwargs": {"autocommit": True}}
    with ConnectionPool(database_dsn(), check=dbpool.check_if_idle, **options) as opened:
        yield opened


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    """The pool's health checks (each a round trip to Postgres), counted."""
    done: list[int] = []
    check = ConnectionPool.check_connection
    monkeypatch.setattr(
        ConnectionPool, "check_connection", staticmethod(lambda conn: done.append(1) or check(conn))
    )
    return done


def _backend_pid(pool: ConnectionPool) -> int:
    with pool.connection() as conn:
        return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def _terminate(pid: int) -> None:
    with psycopg.connect(database_dsn(), autocommit=True) as admin:
        assert terminate_backends(admin, [(pid,)]) == 1


def test_a_connection_in_use_is_not_checked_at_every_handout(pool, checks, monkeypatch):
    monkeypatch.setattr(dbpool, "IDLE_CHECK_AFTER", 3600.0)  # however slow this machine
    for _ in range(5):
        _backend_pid(pool)
    assert len(checks) == 1, "only the first handout of the connection is checked"


def test_a_connection_unused_for_a_while_is_checked_and_a_broken_one_replaced(
    pool, checks, monkeypatch
):
    monkeypatch.setattr(dbpool, "IDLE_CHECK_AFTER", 0.0)  # every handout is "after a while"
    first = _backend_pid(pool)
    _terminate(first)
    assert _backend_pid(pool) != first, "the broken connection was replaced before use"
    assert len(checks) == 3  # the first handout, the broken one's, its replacement's


def test_a_connection_that_broke_since_its_last_use_fails_its_statement_and_is_dropped(
    pool, monkeypatch
):
    # What the check no longer catches within the second is caught as a connection that
    # breaks mid-statement is: the statement raises (the engine hands the run back) and
    # the pool drops the connection when it comes back.
    monkeypatch.setattr(dbpool, "IDLE_CHECK_AFTER", 3600.0)
    first = _backend_pid(pool)
    _terminate(first)
    with pytest.raises(psycopg.OperationalError), pool.connection() as conn:
        conn.execute("SELECT 1")
    assert _backend_pid(pool) != first
