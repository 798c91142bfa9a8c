"""The console watcher every browser test runs under (tests/e2e/conftest.py): a page that
breaks each of its rules once, served by Playwright itself, is reported on each count; a
4xx answer to anything but an asset (a stale form's 409) is not."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e

PAGE = """<!doctype html><title>broken</title>
<link rel="stylesheet" href="/static/missing.css">
<p style="color: red">an inline style the policy refuses</p>
<script src="/broken.js"></script>"""
SCRIPT = (
    "console.error('a console error'); fetch('/api'); fetch('/refused');"
    " throw new Error('an uncaught error');"
)


def _serve(route) -> None:
    path = route.request.url.removeprefix("http://watch.test")
    if path == "/":
        csp = {"Content-Security-Policy": "style-src 'self'"}
        route.fulfill(content_type="text/html", headers=csp, body=PAGE)
    elif path == "/broken.js":
        route.fulfill(content_type="text/javascript", body=SCRIPT)
    elif path == "/api":
        route.fulfill(status=503, body="down")
    elif path == "/refused":
        route.fulfill(status=409, body="a page's answer to a stale form: not a problem")
    else:
        route.fulfill(status=404, body="no such file")


def test_the_watcher_reports_every_kind_of_problem(console_watch, browser):
    context = browser.new_context()  # any context, not only the page fixture's
    page = context.new_page()
    page.route("http://watch.test/**", _serve)
    page.goto("http://watch.test/", wait_until="networkidle")  # the fetch answered too
    expected = [
        "CSP: ",
        "uncaught error: an uncaught error",
        "console.error: a console error",
        "HTTP 404: GET http://watch.test/static/missing.css",
        "HTTP 503: GET http://watch.test/api",
    ]
    seen = [e for e in expected if any(p.startswith(e) for p in console_watch.problems)]
    assert seen == expected, console_watch.problems
    assert not [p for p in console_watch.problems if "409" in p]
    context.close()
    console_watch.problems.clear()  # seen on purpose: this test must not fail for them
