"""Saved views of the runs page (issue 24) in a real Chromium: an operator filters the
list, saves it under a name, goes elsewhere, opens the view again, and deletes it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.engine.runs import start_run
from durableruns.models import SavedView
from tests.e2e.a11y import assert_accessible
from tests.e2e.browser import log_in
from tests.web import agents as _test_agents  # noqa: F401 - registers the test agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_operator_saves_a_filtered_list_and_opens_it_again(page, live_server, bob):
    # No worker: the runs stay queued, as they were created.
    for index in range(2):
        start_run("t-ledger", {"text": f"kept {index}"}, run_id=f"e2e-view-{index}")
    start_run("t-ticking", {"ticks": 1}, run_id="e2e-view-other")
    rows = page.locator("tbody tr")
    saved = page.locator("#saved-views")

    log_in(page, live_server.url, "bob", "/")
    expect(rows).to_have_count(3)
    page.select_option("select[name=agent]", "t-ledger")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(2)
    page.evaluate("window.notReloaded = true")  # htmx saves in place
    page.get_by_label("Save these filters as…").fill("ledger <runs>")
    page.get_by_role("button", name="Save view").click()
    expect(saved.get_by_role("status")).to_have_text("Saved the view “ledger <runs>”.")
    expect(saved.get_by_role("link", name="ledger <runs>")).to_have_attribute(
        "aria-current", "true"
    )
    assert page.evaluate("window.notReloaded") is True
    assert list(SavedView.objects.values_list("owner__username", "name", "query")) == [
        ("bob", "ledger <runs>", "agent=t-ledger")
    ]
    assert_accessible(page, "runs page with a saved view")

    # Elsewhere, then back to every run: the view is a link away.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Effects").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Effect ledger")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    expect(rows).to_have_count(3)
    saved.get_by_role("link", name="ledger <runs>").click()
    expect(page).to_have_url(f"{live_server.url}/?agent=t-ledger")  # the form's empty fields gone
    expect(rows).to_have_count(2)
    expect(page.locator("select[name=agent]")).to_have_value("t-ledger")
    expect(page.locator("#row-e2e-view-other")).to_have_count(0)

    saved.get_by_role("button", name="Delete the saved view ledger <runs>").click()
    expect(saved.get_by_role("status")).to_have_text("Deleted “ledger <runs>”.")
    expect(saved.get_by_role("link")).to_have_count(0)
    expect(rows).to_have_count(2)  # still the filtered list
    assert not SavedView.objects.exists()
