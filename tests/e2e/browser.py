"""Driving Debian's Chromium with Playwright (no browser can be downloaded here)."""

from __future__ import annotations

from playwright.sync_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def log_in(page: Page, base_url: str, username: str, then: str) -> None:
    """Log in through the real form as one of the named actors, landing on `then`."""
    page.goto(f"{base_url}/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-password-1")
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{base_url}{then}")
