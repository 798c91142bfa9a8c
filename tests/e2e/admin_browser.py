"""A page for the admin area's browser tests that records dialogs, logged in as carol
(the admin). The browser, and the console watcher that fails a test on a CSP report,
come from tests/e2e/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture
def page(browser, live_server, carol):
    context = browser.new_context()
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "carol")
    page.fill("#id_password", "carol-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    yield page
    context.close()
