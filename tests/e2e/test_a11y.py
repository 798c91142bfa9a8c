"""The accessibility check the browser tests share (tests/e2e/a11y.py): a page whose only
fault is a minor or moderate one fails it, as a serious one does, and a clean page passes
(a check that cannot fail would prove nothing)."""

from __future__ import annotations

import pytest

from tests.e2e.a11y import assert_accessible

pytestmark = pytest.mark.e2e

CLEAN = """<!doctype html><html lang="en"><title>clean</title>
<main><h1>Runs</h1><h2>Pending</h2><p>None.</p></main></html>"""


def test_it_passes_a_clean_page(page):
    page.set_content(CLEAN)
    assert_accessible(page, "a clean page")


def test_it_fails_a_page_that_skips_a_heading_level(page):
    page.set_content(CLEAN.replace("h2", "h3"))  # heading-order: moderate
    with pytest.raises(AssertionError, match="heading-order"):
        assert_accessible(page, "a page that skips a heading level")


def test_it_fails_content_outside_the_landmarks(page):
    page.set_content(CLEAN.replace("</main>", "</main><p>Footer.</p>"))  # region: moderate
    with pytest.raises(AssertionError, match="region"):
        assert_accessible(page, "a page with text outside its landmarks")
