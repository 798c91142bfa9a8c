"""Chromium fixtures for the admin area's browser tests (a plain module rather than a
conftest, so other areas' tests/e2e/conftest.py can merge without a clash)."""

from __future__ import annotations

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server, carol):
    context = browser.new_context()
    page = context.new_page()
    page.dialogs = []
    page.csp_errors = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.on(
        "console",
        lambda msg: "Content Security Policy" in msg.text and page.csp_errors.append(msg.text),
    )
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "carol")
    page.fill("#id_password", "carol-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    yield page
    context.close()
