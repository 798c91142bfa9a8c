"""Checks every reviewer and admin page gets in the browser tests: axe-core finds no
violation of any impact (minor and moderate too), and at 390 px wide nothing scrolls
sideways."""

from __future__ import annotations

import os
from pathlib import Path

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# Set to write the screenshots somewhere kept (docs/screenshots for the README).
SHOTS = os.environ.get("DURABLERUNS_SHOTS_DIR", "")


WIDE_ELEMENTS = """() => [...document.querySelectorAll("body *")]
  .filter((el) => el.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
  .slice(0, 8).map((el) => el.tagName + "#" + el.id + "." + el.className)"""


def assert_accessible(page: Page, where: str) -> None:
    results = Axe().run(page)
    bad = results.response["violations"]
    details = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in bad]
    assert not bad, f"{where}: {details}"


def assert_fits_a_phone(page: Page, where: str, shot: str, tmp_path: Path) -> Path:
    """No horizontal page scroll at 390 px; returns the screenshot's path."""
    size = page.viewport_size or DESKTOP
    page.set_viewport_size(PHONE)
    try:
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        wide = page.evaluate(WIDE_ELEMENTS) if overflow > 0 else []
        assert overflow <= 0, f"{where}: the page scrolls {overflow} px sideways: {wide}"
        path = Path(SHOTS or tmp_path) / f"{shot}-390.png"
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(size)
    return path


def shoot(page: Page, shot: str, tmp_path: Path) -> Path:
    path = Path(SHOTS or tmp_path) / f"{shot}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
