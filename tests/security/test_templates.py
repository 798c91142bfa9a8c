"""No inline script, style or event handler in any template: the Content-Security-Policy
allows none, so one would silently break the page."""

from __future__ import annotations

import json
import re

from tests.conftest import ROOT

INLINE = {
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),
    "style element": re.compile(r"<style\b", re.IGNORECASE),
    "style attribute": re.compile(r"\sstyle\s*=", re.IGNORECASE),
    "event handler": re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
    "hx-on handler": re.compile(r"\shx-on", re.IGNORECASE),
}


def test_no_template_has_inline_code():
    found = []
    for template in sorted((ROOT / "templates").rglob("*.html")):
        text = template.read_text()
        for what, pattern in INLINE.items():
            found += [f"{template.relative_to(ROOT)}: {what}" for _ in pattern.findall(text)]
    assert found == []


def _htmx_config() -> dict:
    base = (ROOT / "templates" / "durableruns" / "_base.html").read_text()
    return json.loads(re.search(r"<meta name=\"htmx-config\" content='([^']+)'>", base).group(1))


def test_htmx_is_told_not_to_inject_its_indicator_styles():
    assert _htmx_config()["includeIndicatorStyles"] is False


def test_htmx_settles_no_style_attribute():
    """htmx's default settle copies the old `style` attribute onto swapped content: the CSP
    refuses that (style-src-attr) on every swap."""
    assert "style" not in _htmx_config()["attributesToSettle"]
