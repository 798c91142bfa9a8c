"""An admin previews a retention policy and saves it, in Chromium, under the CSP: htmx
swaps the preview into the form and the save lands back on the list."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.models import RetentionPolicy, Run
from tests.admin.factories import make_run
from tests.e2e.admin_browser import page  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_admin_sees_the_preview_before_saving(page, live_server):  # noqa: F811
    make_run("old-failed", Run.Status.FAILED)
    make_run("old-ok", Run.Status.SUCCEEDED)
    page.goto(f"{live_server.url}/manage/policies/")
    form = page.locator("#policy-form")
    form.get_by_label("Name").fill("drop failed")
    form.get_by_label("failed").check()
    form.get_by_label("Older than (days)").fill("30")
    form.get_by_label("Action").select_option("delete")
    expect(form.get_by_role("button", name="Save policy")).to_have_count(0)

    form.get_by_role("button", name="Preview").click()
    expect(page.locator("#policy-preview")).to_contain_text(
        "This policy alone: would delete 1 runs, redact 0."
    )
    expect(page.locator("#policy-preview .sample")).to_have_text("old-failed")
    assert not RetentionPolicy.objects.exists()

    page.get_by_role("button", name="Save policy").click()
    expect(page.locator(".messages")).to_contain_text("Saved policy 'drop failed'")
    expect(page.locator("#overall-preview")).to_contain_text("would delete 1 runs, redact 0")
    assert page.url == f"{live_server.url}/manage/policies/"
    assert RetentionPolicy.objects.get().statuses == ["failed"]
