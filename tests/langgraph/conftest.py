from __future__ import annotations

from collections.abc import Iterator

import pytest

from durableruns.langgraph.saver import close_connection


@pytest.fixture(autouse=True)
def _close_the_saver_connection() -> Iterator[None]:
    """The savers use one connection on their own thread; close it after each test so
    the test database can be flushed and dropped."""
    yield
    close_connection()
