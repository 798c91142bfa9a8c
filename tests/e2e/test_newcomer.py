"""A newcomer's first minute in a real Chromium: the printed address, the login, and the
page each role lands on, with no request answered 404 (the favicon included) and no
console error on the way."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.a11y import assert_accessible

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LANDINGS = [
    ("alice", "/approvals/", "Approvals"),  # reviewer: the inbox
    ("bob", "/", "Runs"),  # operator: the runs
    ("carol", "/", "Runs"),  # admin: the runs, with every other page one click away
]


@pytest.fixture
def watched(browser):
    """A page that records every 4xx/5xx answer and every console error it sees."""
    context = browser.new_context()
    page = context.new_page()
    page.failures = []
    page.on(
        "response",
        lambda response: (
            response.status >= 400 and page.failures.append(f"{response.status} {response.url}")
        ),
    )
    page.on(
        "console",
        lambda msg: msg.type == "error" and page.failures.append(f"console: {msg.text}"),
    )
    yield page
    context.close()


@pytest.mark.parametrize(("username", "landing", "nav"), LANDINGS)
def test_the_printed_address_lands_each_role_on_its_own_page(
    watched, live_server, alice, bob, carol, username, landing, nav
):
    page = watched
    page.goto(f"{live_server.url}/")  # what `make demo` prints
    page.wait_for_url(f"{live_server.url}/login/?next=/")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-password-1")
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{live_server.url}{landing}")
    expect(page.locator("nav[aria-label=Main] a[aria-current=page]")).to_contain_text(nav)
    # The favicon is requested once the page has loaded; wait for it to be answered.
    icon = page.evaluate(
        "fetch(document.querySelector('link[rel=icon]').href).then((r) => r.status)"
    )
    assert icon == 200
    page.wait_for_load_state("networkidle")
    assert page.failures == []
    assert_accessible(page, f"{username}'s landing page")


def test_a_link_to_a_page_still_lands_there_after_logging_in(watched, live_server, alice):
    page = watched
    # Asked for by pages without the link (the API's JSON, old browsers), before login.
    assert page.goto(f"{live_server.url}/favicon.ico").status == 200
    page.goto(f"{live_server.url}/effects/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password-1")
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{live_server.url}/effects/")
    assert page.failures == []
