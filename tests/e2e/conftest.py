from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS, ConsoleWatch

# Playwright's sync API runs an event loop in the test thread, and its browser
# fixtures live across tests; the ORM calls the tests make around it are still
# plain synchronous calls. Processes that stand for a deployment are started
# without this switch (tests/deploy/environ.py).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(20_000)
    yield context.new_page()
    context.close()


@pytest.fixture(autouse=True)
def console_watch(request: pytest.FixtureRequest) -> Iterator[ConsoleWatch | None]:
    """Fails a browser test whose pages saw a CSP violation, an uncaught error, a console
    error, a missing asset or a 5xx answer, in any context any fixture made."""
    if "browser" not in request.fixturenames:
        yield None
        return
    with ConsoleWatch(request.getfixturevalue("browser")) as watch:
        yield watch
    if watch.problems and not request.node.get_closest_marker("console_problems"):
        seen = "\n  ".join(dict.fromkeys(watch.problems))
        pytest.fail(f"the browser saw:\n  {seen}", pytrace=False)
