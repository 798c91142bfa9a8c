from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _sync_orm_beside_playwright(monkeypatch):
    """Playwright's sync API runs an event loop in the test thread; the ORM calls the
    tests make around it are still plain synchronous calls. Scoped to each browser
    test, so no other test (or process it starts) inherits the switch."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
