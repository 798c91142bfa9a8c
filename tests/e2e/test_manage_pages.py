"""Admins in a real Chromium: a retention save refused when it is not what was previewed,
"apply now" and "delete policy" behind confirmations that show what will happen, and
a redaction rule's matches in recent runs before it is saved. Each page passes axe-core
and fits a 390 px phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.models import RedactionRule, RetentionPolicy, Run
from tests.admin.factories import make_run
from tests.e2e.a11y import assert_accessible, assert_fits_a_phone, shoot
from tests.e2e.admin_browser import page  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _old_failed_runs(count: int) -> None:
    for index in range(count):
        make_run(f"old-failed-{index}", Run.Status.FAILED)


def test_a_save_that_is_not_what_was_previewed_is_refused(page, live_server, tmp_path):  # noqa: F811
    _old_failed_runs(3)
    page.goto(f"{live_server.url}/manage/policies/")
    form = page.locator("#policy-form")
    form.get_by_label("Name").fill("drop failed")
    form.get_by_label("failed").check()
    form.get_by_label("Older than (days)").fill("3650")
    form.get_by_label("Action").select_option("delete")
    form.get_by_role("button", name="Preview").click()
    expect(page.locator("#policy-preview")).to_contain_text("would delete 0 runs")

    # The age changes after the preview: saving would delete 3 runs nobody was shown.
    page.locator("#policy-form").get_by_label("Older than (days)").fill("0")
    page.locator("#policy-form").get_by_role("button", name="Save policy").click()
    expect(page.locator("#stale-preview")).to_contain_text("Not saved")
    expect(page.locator("#policy-preview")).to_contain_text("would delete 3 runs")
    expect(page.locator("#policy-preview .sample li")).to_have_count(3)
    assert not RetentionPolicy.objects.exists()
    assert_accessible(page, "policies page with a refused save")
    shoot(page, "retention-refused", tmp_path)
    assert_fits_a_phone(page, "policies page", "retention", tmp_path)

    # Now the admin has seen "would delete 3": that save goes through.
    page.locator("#policy-form").get_by_role("button", name="Save policy").click()
    expect(page.locator(".messages")).to_contain_text("Saved policy 'drop failed'")
    assert RetentionPolicy.objects.get().age_days == 0
    assert Run.objects.count() == 3  # saving deletes nothing by itself


def test_apply_now_and_delete_go_through_a_confirmation(page, live_server, tmp_path):  # noqa: F811
    _old_failed_runs(2)
    policy = RetentionPolicy.objects.create(
        name="drop failed", statuses=["failed"], age_days=30, action="delete"
    )
    page.goto(f"{live_server.url}/admin/policies/")  # old links still work
    assert page.url == f"{live_server.url}/manage/policies/"
    page.get_by_role("link", name="Apply now…").click()
    expect(page.locator("h1")).to_have_text("Apply retention now?")
    expect(page.locator("#policy-preview")).to_contain_text("would delete 2 runs, redact 0")
    expect(page.locator("#policy-preview .sample")).to_contain_text("old-failed-0")
    assert Run.objects.count() == 2  # nothing happened yet
    assert_accessible(page, "apply confirmation")
    shoot(page, "retention-apply-confirm", tmp_path)
    assert_fits_a_phone(page, "apply confirmation", "retention-apply-confirm", tmp_path)
    page.get_by_role("button", name="Apply now: would delete 2 runs, redact 0").click()
    expect(page.locator(".messages")).to_contain_text("Retention sweep affected 2 runs")
    assert Run.objects.count() == 0

    page.get_by_role("link", name="Delete… policy drop failed").click()
    expect(page.locator("h1")).to_have_text("Delete policy drop failed?")
    expect(page.locator("main")).to_contain_text("Deleting the policy deletes no runs")
    assert RetentionPolicy.objects.filter(pk=policy.pk).exists()
    page.get_by_role("button", name="Delete policy drop failed").click()
    expect(page.locator("main")).to_contain_text("No policies: runs are kept forever.")
    assert not RetentionPolicy.objects.exists()


def test_a_redaction_rule_shows_its_matches_before_it_is_saved(page, live_server, tmp_path):  # noqa: F811
    make_run("staff-run", Run.Status.SUCCEEDED)
    Run.objects.filter(pk="staff-run").update(input={"staff": {"employee_id": "E-4471"}})
    make_run("other-run", Run.Status.SUCCEEDED)
    page.goto(f"{live_server.url}/manage/redaction/")
    form = page.locator("#rule-form")
    form.get_by_label("Kind").select_option("key")
    form.get_by_label("Key name or pattern").fill("employee_id")
    form.get_by_role("button", name="Preview matches in recent runs").click()
    preview = page.locator("#rule-preview")
    expect(preview).to_contain_text("Matches in 1 of the 2 most recent runs")
    expect(preview.locator("#rule-matches tbody tr")).to_have_count(1)
    expect(preview.locator("#rule-matches")).to_contain_text("staff.employee_id")
    assert not RedactionRule.objects.exists()  # previewing saves nothing
    assert_accessible(page, "redaction page")
    shoot(page, "redaction-preview", tmp_path)
    assert_fits_a_phone(page, "redaction page", "redaction", tmp_path)

    form.get_by_role("button", name="Add rule").click()
    expect(page.locator("#rules")).to_contain_text("employee_id")
    assert RedactionRule.objects.get().value == "employee_id"


def test_legal_holds_have_a_reason_and_a_list(page, live_server, tmp_path):  # noqa: F811
    make_run("held-run", Run.Status.SUCCEEDED)
    page.goto(f"{live_server.url}/runs/held-run/")
    page.get_by_text("Legal hold…").click()
    page.get_by_label("Reason (case or ticket reference)").fill("case 2026-114")
    page.get_by_role("button", name="Put on legal hold").click()
    expect(page.locator("#legal-hold")).to_contain_text("Reason: case 2026-114")
    page.goto(f"{live_server.url}/manage/holds/?q=2026-114")
    expect(page.locator("#held tbody tr")).to_have_count(1)
    expect(page.locator("#held")).to_contain_text("held-run")
    assert_accessible(page, "legal holds")
    assert_fits_a_phone(page, "legal holds", "holds", tmp_path)

    # The hold is in the audit log, found by its run; a bad date says so and shows nothing.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    page.get_by_label("Run id").fill("held-run")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#audit tbody tr")).to_have_count(1)
    expect(page.locator("#audit")).to_contain_text("case 2026-114")
    assert_accessible(page, "audit log")
    assert_fits_a_phone(page, "audit log", "audit", tmp_path)
    page.goto(f"{live_server.url}/manage/audit/?run=held-run&since=yesterday")
    expect(page.get_by_role("alert")).to_contain_text("Not filtered")
    expect(page.locator("#audit")).not_to_contain_text("case 2026-114")
    assert_accessible(page, "audit log with a refused filter")
