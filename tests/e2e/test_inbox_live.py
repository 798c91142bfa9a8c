"""The inbox live in a real Chromium (issue 27): unchanged polls are 204s, a card
decided elsewhere turns decided within a poll while the reviewer's typing in another
card keeps its text and focus, and the page waits as long as a busy server asks."""

from __future__ import annotations

import itertools
import time

import pytest
from playwright.sync_api import Route, expect

from durableruns.services import approvals as approval_service
from tests.e2e.browser import log_in
from tests.web.test_approvals import _pending

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _is_poll(url: str) -> bool:
    return "/approvals/?" in url and "after=" in url


def test_a_card_decided_elsewhere_turns_decided_and_typing_survives(
    page, live_server, alice, carol
):
    typing, gone = _pending("e2e-typing"), _pending("e2e-gone")
    log_in(page, live_server.url, "alice", "/approvals/")
    comment = page.locator(f"#comment-{typing.pk}")
    comment.fill("checking the order first")
    expect(page.locator("#inbox-count")).to_have_text("2")
    unchanged = page.wait_for_event("response", lambda r: _is_poll(r.url), timeout=15_000)
    assert unchanged.status == 204 and unchanged.body() == b""

    approval_service.decide(gone, "approve", user=carol, comment="")
    changed = time.monotonic()
    card = page.locator(f"#approval-{gone.pk}")
    expect(card).to_contain_text("Approved by carol", timeout=10_000)
    took = time.monotonic() - changed
    expect(page.locator("#inbox-count")).to_have_text("1")
    expect(comment).to_be_focused()
    expect(comment).to_have_value("checking the order first")
    print(f"decided elsewhere -> shown in {took:.2f} s (poll every 2 s)")


def test_the_page_waits_as_long_as_the_server_asks(page, live_server, alice):
    _pending("e2e-backoff")
    started: list[float] = []

    def told_to_wait(route: Route) -> None:
        started.append(time.monotonic())
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "x-poll-interval": "5"})

    page.route(lambda url: _is_poll(url), told_to_wait)
    log_in(page, live_server.url, "alice", "/approvals/")
    for _ in range(3):
        page.wait_for_event("request", lambda r: _is_poll(r.url), timeout=20_000)
    gaps = [b - a for a, b in itertools.pairwise(started)]
    # Without the header the inbox polls every 2 s; told 5 s, never sooner.
    assert min(gaps) >= 4.8, gaps


POLL_LOG = """
window.pollLog = [];
["htmx:beforeSend", "htmx:afterRequest"].forEach(function (name) {
  document.addEventListener(name, function (event) {
    if (event.detail.elt.id === "inbox-poll") { window.pollLog.push([name, performance.now()]); }
  });
});
"""


def test_a_slow_poll_is_not_followed_at_once_by_another(page, live_server, alice):
    _pending("e2e-slow")

    def slow(route: Route) -> None:
        time.sleep(3)  # the answer takes longer than the 2 s interval
        route.continue_()

    page.add_init_script(POLL_LOG)
    page.route(lambda url: _is_poll(url), slow)
    log_in(page, live_server.url, "alice", "/approvals/")
    page.wait_for_function(
        "() => window.pollLog.filter(e => e[0] === 'htmx:beforeSend').length >= 3",
        timeout=30_000,
    )
    log = page.evaluate("window.pollLog")
    names = [name for name, _ in log]
    # Never two in flight, and each next poll at least half an interval after the answer.
    assert names[:5] == ["htmx:beforeSend", "htmx:afterRequest"] * 2 + ["htmx:beforeSend"], log
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(log) if a[0] == "htmx:afterRequest"]
    assert min(gaps) >= 900, gaps
