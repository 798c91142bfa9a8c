"""Operators' actions in a real Chromium against real Celery workers: a fork with an
edited input, bulk cancel by filter with a reason, and the browsable API docs."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.engine.runs import start_run
from durableruns.models import AuditEvent, Run
from tests.conftest import wait_for
from tests.e2e.a11y import assert_accessible
from tests.e2e.browser import log_in
from tests.web import agents as _test_agents  # noqa: F401 - registers the test agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AGENT_MODULES = {"DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.web.agents"}


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def test_an_operator_forks_with_an_edited_input(page, processes, live_server, bob):
    processes.worker(extra_env=AGENT_MODULES)
    start_run("t-ledger", {"text": "as asked"}, run_id="e2e-fork-parent")
    wait_for(lambda: _status("e2e-fork-parent") == Run.Status.SUCCEEDED, message="the parent")

    log_in(page, live_server.url, "bob", "/runs/e2e-fork-parent/")
    page.select_option("select[name=position]", "1")
    page.get_by_role("button", name="Fork…").click()
    page.locator("#fork-input").fill('{"text": "as meant"}')
    page.get_by_role("button", name="Check the edits").click()
    expect(page.locator("#fork-notes")).to_contain_text("edited input")
    expect(page.locator("#fork-input")).to_have_value('{\n  "text": "as meant"\n}')
    assert_accessible(page, "fork with its edited input checked")
    page.get_by_label("Reason (audited, required)").fill("the customer meant another note")
    # Checking the edits kept the sandbox ticked (the default); this fork is for real.
    sandbox = page.get_by_label("Sandbox: do not call write tools", exact=False)
    expect(sandbox).to_be_checked()
    sandbox.uncheck()
    page.get_by_role("button", name="Fork from step 1").click()
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=30_000)
    expect(page.locator("#run-input")).to_contain_text('"as meant"')
    expect(page.locator("#run-result")).to_contain_text('"note": "as meant"')
    child = Run.objects.get(parent_id="e2e-fork-parent")
    assert child.input == {"text": "as meant"} and not child.sandbox
    event = AuditEvent.objects.get(action="run.fork")
    assert event.after["reason"] == "the customer meant another note"


def test_an_operator_cancels_every_run_matching_a_filter_with_a_reason(page, live_server, bob):
    # No worker: the runs stay queued, so there is something to cancel.
    for index in range(3):
        start_run("t-ledger", {"text": f"batch {index}"}, run_id=f"e2e-batch-{index}")
    start_run("t-ticking", {"ticks": 1}, run_id="e2e-other-agent")

    log_in(page, live_server.url, "bob", "/")
    expect(page.get_by_role("button", name="Cancel selected")).to_be_disabled()
    page.select_option("select[name=agent]", "t-ledger")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("tbody tr")).to_have_count(3)
    page.get_by_role("button", name="Cancel all matching").click()
    expect(page.locator(".confirm-summary")).to_contain_text("3 runs match agent is 't-ledger'")
    assert_accessible(page, "bulk cancel confirmation")
    page.get_by_label("Reason").fill("a bad deploy of t-ledger")
    page.get_by_role("button", name="Cancel 3 runs").click()
    expect(page.locator("#bulk-progress")).to_contain_text("Cancel: 3 runs changed. Done.")
    # Nothing of the question is left to press again, nor the statuses it listed.
    expect(page.get_by_role("heading", level=1)).to_have_text("Cancel: done")
    expect(page.get_by_role("button", name="Cancel 3 runs")).to_have_count(0)
    expect(page.locator("#bulk-sample")).not_to_contain_text("Queued")
    assert_accessible(page, "bulk cancel done")
    statuses = {run.id: run.status for run in Run.objects.all()}
    assert statuses == {
        "e2e-batch-0": "cancelled",
        "e2e-batch-1": "cancelled",
        "e2e-batch-2": "cancelled",
        "e2e-other-agent": "queued",
    }
    reasons = AuditEvent.objects.filter(action="run.cancel").values_list("after", flat=True)
    assert [after["reason"] for after in reasons] == ["a bad deploy of t-ledger"] * 3


def test_select_all_enables_cancel_selected(page, live_server, bob):
    for index in range(2):
        start_run("t-ledger", {"text": f"picked {index}"}, run_id=f"e2e-picked-{index}")
    log_in(page, live_server.url, "bob", "/")
    cancel = page.get_by_role("button", name="Cancel selected")
    expect(cancel).to_be_disabled()
    page.locator("#select-all").check()
    expect(cancel).to_be_enabled()
    expect(page.locator("#selected-count")).to_have_text("2 selected")


def test_the_api_docs_render_under_the_csp(page, live_server):
    """Nothing the CSP blocks, style included: the console watcher (conftest.py) says."""
    page.goto(f"{live_server.url}/api/docs/")
    expect(page.locator(".swagger-ui .title")).to_contain_text("durableruns API", timeout=20_000)
    expect(page.locator(".opblock").first).to_be_visible()
    assert_accessible(page, "API docs")
