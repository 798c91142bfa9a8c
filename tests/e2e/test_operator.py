"""Operators in a real Chromium, against real Celery workers: watch a run live, settle
an escalation, fork a finished run, see a dry replay diverge after a code change, and
start a run from the Runs page."""

from __future__ import annotations

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from durableruns.engine import crashpoints, registry
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from tests.conftest import wait_for
from tests.e2e.a11y import assert_accessible, assert_fits_a_phone
from tests.e2e.browser import log_in
from tests.web import agents as dashboard_agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The workers load the dashboard's test agents as well as the demo agents.
AGENT_MODULES = {"DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.web.agents"}


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def test_an_operator_watches_the_timeline_grow_and_polling_stop(page, processes, live_server, bob):
    run, _ = start_run("t-ticking", {"ticks": 5, "nap": 1.0}, run_id="e2e-live")
    log_in(page, live_server.url, "bob", f"/runs/{run.id}/")
    page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded
    live = page.locator("#run-live")
    steps = page.locator("#steps > li.step")
    expect(live).to_have_attribute("hx-trigger", "every 1s")
    expect(steps).to_have_count(0)
    processes.worker(extra_env=AGENT_MODULES)  # only now does the run start moving
    processes.beat()

    # Open the first step while the run goes on: it loads its output once, and stays
    # open while polling brings new steps (recorded steps are preserved, not redrawn).
    first = page.locator("#step-0")
    first.locator("summary").click()
    expect(first.locator(".step-output")).to_contain_text('"tick 0"')
    shown = steps.count()
    expect(steps).not_to_have_count(shown, timeout=30_000)
    expect(first.locator("details")).to_have_attribute("open", "")
    seen: list[int] = []

    def finished() -> bool:
        # Status first: once it reads Succeeded no swap follows, so the count is final.
        status = page.locator("#run-status").inner_text()
        count = steps.count()
        if not seen or seen[-1] != count:
            seen.append(count)
        return status == "Succeeded"

    wait_for(finished, timeout=60, interval=0.1, message="the run to finish on the page")
    # Every new step arrived by htmx polling into the same page: 5 ticks and 4 naps.
    assert page.evaluate("window.loadedOnce") is True
    assert seen == sorted(seen) and len(seen) >= 2 and seen[-1] == 9, seen
    # The terminal render has no trigger, so htmx polls no more: no request to the run
    # page within three polling intervals.
    expect(live).not_to_have_attribute("hx-trigger", "every 1s")
    assert live.get_attribute("hx-get") is None
    with pytest.raises(PlaywrightTimeout):
        page.wait_for_event(
            "request", lambda request: f"/runs/{run.id}/" in request.url, timeout=3_000
        )


def test_an_operator_resolves_an_escalation_and_the_run_goes_on(
    page, processes, live_server, bob, crash_dir
):
    """The worker dies after the unsafe refund started; the next worker cannot know
    whether it happened and escalates; bob says it did, with the provider's answer."""
    first = processes.worker(extra_env={"DURABLERUNS_CRASH_DIR": str(crash_dir)})
    processes.beat()
    crashpoints.arm(crash_dir, "e2e-escalated", crashpoints.AFTER_EFFECT_STARTED, 2)
    start_run("refund-bot", {"order_id": "A-1001", "payments": "none"}, run_id="e2e-escalated")
    wait_for(lambda: first.poll() is not None, message="the worker to crash")
    processes.kill(first)
    processes.worker()
    wait_for(
        lambda: _status("e2e-escalated") == Run.Status.ESCALATED, message="the run to escalate"
    )
    effect = Effect.objects.get(run_id="e2e-escalated", state=Effect.State.UNKNOWN)

    log_in(page, live_server.url, "bob", "/escalations/")
    card = page.locator(f"#escalation-{effect.pk}")
    expect(card).to_contain_text(effect.idempotency_key)
    expect(card).to_contain_text("refund_unsafe")
    card.locator("textarea[name=result]").fill("{not json")
    card.get_by_role("button", name="It happened").click()
    expect(page.locator(f"#escalation-{effect.pk} [role=alert]")).to_contain_text(
        "The result is not valid JSON"
    )
    assert_accessible(page, "escalations with a refused result")
    assert _status("e2e-escalated") == Run.Status.ESCALATED

    card = page.locator(f"#escalation-{effect.pk}")
    card.locator("textarea[name=result]").fill('{"refund_id": "rf_checked_by_bob"}')
    card.get_by_role("button", name="It happened").click()
    expect(page.locator(".messages")).to_contain_text("Resolved")
    expect(page.locator(f"#escalation-{effect.pk}")).to_have_count(0)
    wait_for(lambda: _status("e2e-escalated") == Run.Status.SUCCEEDED, message="the run to go on")
    assert Run.objects.get(pk="e2e-escalated").result["refund_id"] == "rf_checked_by_bob"


def test_an_operator_forks_a_finished_run_from_a_middle_step(page, processes, live_server, bob):
    processes.worker(extra_env=AGENT_MODULES)
    start_run("t-ledger", {"text": "forked"}, run_id="e2e-parent")
    wait_for(lambda: _status("e2e-parent") == Run.Status.SUCCEEDED, message="the parent run")

    log_in(page, live_server.url, "bob", "/runs/e2e-parent/")
    page.select_option("select[name=position]", "1")
    page.get_by_role("button", name="Fork…").click()
    expect(page.locator("h2")).to_contain_text("1 effect would execute again, with new keys")
    expect(page.locator("tr.again")).to_contain_text("record_note")
    sandbox = page.get_by_label("Sandbox: do not call write tools", exact=False)
    expect(sandbox).to_be_checked()  # a fork calls no write tool unless unticked
    page.get_by_role("button", name="Fork from step 1").click()
    expect(page.get_by_role("alert")).to_contain_text("not forked: give a reason")
    assert_accessible(page, "fork preview with a refused fork")
    assert not Run.objects.filter(parent_id="e2e-parent").exists()
    page.get_by_label("Reason (audited, required)").fill("the note was wrong")
    page.get_by_label("Sandbox: do not call write tools", exact=False).uncheck()
    page.get_by_role("button", name="Fork from step 1").click()
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=30_000)
    expect(page.locator(".facts")).to_contain_text("Forked from")
    origins = page.locator("#steps .origin")
    expect(origins).to_have_text(["reused from the parent run", "executed", "executed"])
    assert_accessible(page, "a finished fork's run page")
    child = Run.objects.get(parent_id="e2e-parent")
    assert child.status == Run.Status.SUCCEEDED and child.fork_position == 1


def _diverging_ledger_bot(run, task: dict) -> dict:
    run.step("prepare", dashboard_agents._value, "prepared")
    run.call(dashboard_agents.record_note, text="rewritten by a deploy")
    return {}


def test_a_dry_replay_shows_where_changed_agent_code_diverges(
    page, processes, live_server, bob, monkeypatch
):
    processes.worker(extra_env=AGENT_MODULES)
    start_run("t-ledger", {"text": "original"}, run_id="e2e-replayed")
    wait_for(lambda: _status("e2e-replayed") == Run.Status.SUCCEEDED, message="the run")
    # The web process (this one, serving live_server) now has different agent code.
    monkeypatch.setattr(registry.get_agent("t-ledger", "1"), "fn", _diverging_ledger_bot)

    log_in(page, live_server.url, "bob", "/runs/e2e-replayed/")
    page.get_by_role("link", name="Dry replay").click()
    expect(page.locator(".replay-summary")).to_contain_text("DIVERGED at step 1")
    expect(page.locator("tr.entry-replayed")).to_have_count(1)
    diverged = page.locator("tr.entry-diverged")
    expect(diverged).to_contain_text("record_note")
    expect(diverged).to_contain_text("non-determinism at step 1")
    assert_accessible(page, "a dry replay that diverged")


def test_an_operator_starts_a_run_from_the_runs_page(page, processes, live_server, bob, tmp_path):
    processes.worker(extra_env=AGENT_MODULES)
    log_in(page, live_server.url, "bob", "/")
    page.get_by_role("link", name="Start a run").click()
    page.get_by_label("Agent").select_option("research-bot")
    page.get_by_label("Input (a JSON object)").fill('{"topic": "durable agents"')
    page.get_by_role("button", name="Start the run").click()
    expect(page.get_by_role("alert")).to_contain_text("Not started: input is not valid JSON")
    expect(page.get_by_label("Input (a JSON object)")).to_have_value('{"topic": "durable agents"')
    assert_accessible(page, "start form with a refused input")
    assert_fits_a_phone(page, "start form", "start", tmp_path)
    assert not Run.objects.exists()

    page.get_by_label("Input (a JSON object)").fill('{"topic": "durable agents"}')
    page.get_by_label("Run id (optional)").fill("e2e-started")
    page.get_by_role("button", name="Start the run").click()
    expect(page).to_have_url(f"{live_server.url}/runs/e2e-started/")
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=60_000)
    assert Run.objects.get(pk="e2e-started").created_by == bob


def test_an_operator_cancels_a_run_saying_why(page, live_server, bob, tmp_path):
    start_run("t-ticking", {"ticks": 50, "nap": 1.0}, run_id="e2e-cancel")  # no worker: queued
    log_in(page, live_server.url, "bob", "/runs/e2e-cancel/")
    page.get_by_role("link", name="Cancel run…").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Cancel run e2e-cancel?")
    assert_accessible(page, "cancel confirmation")
    assert_fits_a_phone(page, "cancel confirmation", "cancel", tmp_path)
    page.get_by_label("Reason (audited)").fill("customer withdrew the request")
    page.get_by_role("button", name="Cancel the run").click()
    expect(page).to_have_url(f"{live_server.url}/runs/e2e-cancel/")
    expect(page.locator("#run-status")).to_have_text("Cancelled")
    expect(page.locator("body")).to_contain_text("customer withdrew the request")
    expect(page.get_by_role("status").first).to_contain_text("Cancelled run e2e-cancel.")
    assert_accessible(page, "run page with a flash message")
