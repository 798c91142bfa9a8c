"""The run page read while it runs, in a real Chromium against real Celery workers:
live updates morph the page, so what the operator selected, opened and focused stays."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from durableruns.engine import crashpoints
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run, Step
from tests.conftest import wait_for
from tests.e2e.browser import log_in
from tests.web import agents as _test_agents  # noqa: F401 - registers the test agents
from tests.web.dashboard import make_effect, make_run, make_step, step_row

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AGENT_MODULES = {"DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.web.agents"}
STEPS = "#steps > li.step"


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def test_a_selection_an_opened_step_and_focus_survive_live_updates(
    page, processes, live_server, bob
):
    run, _ = start_run("t-long", {"steps": 60, "pause": 0.5}, run_id="e2e-sixty-steps")
    log_in(page, live_server.url, "bob", f"/runs/{run.id}/")
    expect(page.locator("#run-input")).to_contain_text('"steps": 60')  # the input is shown
    processes.worker(extra_env=AGENT_MODULES)
    expect(page.locator("#step-2")).to_be_visible(timeout=30_000)

    first = page.locator("#step-1")
    first.locator("summary").click()
    expect(first.locator(".step-output")).to_contain_text('"work 1"')
    selected = page.evaluate(
        """() => {
            const range = document.createRange();
            range.selectNodeContents(document.getElementById("run-input"));
            const selection = window.getSelection();
            selection.removeAllRanges();
            selection.addRange(range);
            document.getElementById("step-1").sameNode = true;
            document.getElementById("cancel-run").focus();
            return selection.toString();
        }"""
    )
    assert '"steps": 60' in selected
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if run.id in request.url else None)
    began = time.monotonic()
    shown = page.locator(STEPS).count()
    assert shown <= 35, shown

    # At 0.5 s a step, the 15 or more steps still to come take over 10 s of updates;
    # checked before the last step, while the run (and its Cancel button) is live.
    wait_for(
        lambda: page.locator(STEPS).count() >= 55,
        timeout=90,
        interval=0.2,
        message="55 steps on the page",
    )
    assert time.monotonic() - began >= 10
    assert len(polls) >= 8, polls
    state = page.evaluate(
        """() => ({
            selection: window.getSelection().toString(),
            open: document.querySelector("#step-1 details").open,
            sameNode: document.getElementById("step-1").sameNode === true,
            focused: document.activeElement.id,
        })"""
    )
    assert state == {"selection": selected, "open": True, "sameNode": True, "focused": "cancel-run"}
    expect(first.locator(".step-output")).to_contain_text('"work 1"')
    expect(page.locator("#run-status")).to_have_text("Succeeded", timeout=60_000)
    assert page.evaluate("window.getSelection().toString()") == selected


def _bar_x(page, position: int) -> float:
    """Where a row's execution starts, as a fraction of its bar's width on the screen."""
    return page.evaluate(
        """(id) => {
            const svg = document.querySelector(`#${id} svg.bar`).getBoundingClientRect();
            const ran = document.querySelector(`#${id} svg.bar rect.ran`).getBoundingClientRect();
            return (ran.left - svg.left) / svg.width;
        }""",
        f"step-{position}",
    )


def test_a_new_step_is_appended_and_the_rows_shown_rescale(page, live_server, bob):
    """A changed poll sends the new row alone: it shows within 2 s, the rows already
    shown stay (the same nodes), the oldest leaves the window, and every bar is redrawn
    on the longer axis in the browser."""
    origin = timezone.now() - timedelta(seconds=60)
    run = make_run("e2e-growing", status=Run.Status.RUNNING, started_at=origin, steps_used=101)
    Step.objects.bulk_create(
        step_row(run, p, kind="compute", name="work", start_ms=p * 500, duration_ms=400)
        for p in range(101)
    )
    effects = {p: make_effect(run, p, tool="lookup_order").pk for p in range(1, 101, 5)}

    def changed_poll(answer) -> bool:
        return bool(
            answer.request.headers.get("hx-request")
            and answer.url.endswith(f"/runs/{run.id}/")
            and answer.status == 200
        )

    changed: list = []  # the poll answers that changed the page
    page.on("response", lambda r: changed.append(r) if changed_poll(r) else None)
    log_in(page, live_server.url, "bob", f"/runs/{run.id}/")
    expect(page.locator(STEPS)).to_have_count(100)  # steps #1 to #100
    expect(page.locator(f"#effect-{effects[1]}")).to_be_visible()
    before = _bar_x(page, 100)
    assert 0.75 < before < 0.9, before  # 50 s into an axis of about a minute
    page.evaluate("document.getElementById('step-50').sameNode = true")

    # A step running for a minute more: the axis doubles. Waiting for the changed
    # answer itself, not only for the row: the row can show before Playwright hands the
    # answer to the listener (CI once saw the row and an empty list).
    with page.expect_response(changed_poll, timeout=2_000):
        effects[101] = make_effect(run, 101, tool="lookup_order").pk
        Run.objects.filter(pk=run.pk).update(steps_used=102, updated_at=timezone.now())
        make_step(run, 101, kind="compute", name="work", start_ms=60_000, duration_ms=60_000)
    expect(page.locator("#step-101")).to_be_visible(timeout=2_000)
    polled = [len(answer.body()) for answer in changed]
    assert polled and max(polled) < 5_000, polled  # the new row, not the 100 rows shown
    expect(page.locator("#step-1")).to_have_count(0)
    expect(page.locator(STEPS)).to_have_count(100)
    # The step's effect (committed before it) joins the table; step #1's leaves with it.
    expect(page.locator(f"#effects-settled > #effect-{effects[101]}")).to_be_visible()
    expect(page.locator(f"#effect-{effects[1]}")).to_have_count(0)
    expect(page.locator("#effects-settled > tr")).to_have_count(20)
    assert page.evaluate("document.getElementById('step-50').sameNode") is True
    axis = page.locator("#timeline-head").get_attribute("data-axis-seconds")
    assert float(axis) >= 120
    expect(page.locator("#step-2 svg.bar")).to_have_attribute("viewBox", f"0 0 {axis} 12")
    after = _bar_x(page, 100)
    assert after == pytest.approx(before / 2, rel=0.1), (before, after)
    # The page as it stands is the page a reload shows.
    shown = page.evaluate("[...document.querySelectorAll('#steps > li.step')].map(r => r.id)")
    page.reload()
    assert (
        page.evaluate("[...document.querySelectorAll('#steps > li.step')].map(r => r.id)") == shown
    )


def test_a_retrying_step_shows_its_attempt_and_next_retry(page, processes, live_server, bob):
    retrying = {**AGENT_MODULES, "DURABLERUNS_RETRY_MAX_ATTEMPTS": "50"}
    processes.worker(extra_env={**retrying, "DURABLERUNS_RETRY_BASE_DELAY": "4"})
    processes.beat()
    run, _ = start_run("t-always-flaky", {}, run_id="e2e-flaky")
    log_in(page, live_server.url, "bob", f"/runs/{run.id}/")
    retry = page.locator("#pending-retry")
    expect(retry).to_contain_text("Step #1 is retrying: attempt", timeout=30_000)
    expect(retry).to_contain_text("failed; attempt")
    assert page.locator("#next-retry").get_attribute("datetime")
    expect(page.locator("#pending-error")).to_contain_text("the provider timed out")
    expect(page.locator("#step-pending")).to_be_visible()
    # Each failed attempt is its own segment on the pending row's bar, timed by the engine.
    expect(page.locator("#step-pending rect.attempt-failed").first).to_be_attached()


def test_an_escalated_run_links_to_its_resolution(page, processes, live_server, bob, crash_dir):
    first = processes.worker(extra_env={"DURABLERUNS_CRASH_DIR": str(crash_dir)})
    processes.beat()
    crashpoints.arm(crash_dir, "e2e-escalated-link", crashpoints.AFTER_EFFECT_STARTED, 2)
    start_run("refund-bot", {"order_id": "A-1001", "payments": "none"}, run_id="e2e-escalated-link")
    wait_for(lambda: first.poll() is not None, message="the worker to crash")
    processes.kill(first)
    processes.worker()
    wait_for(
        lambda: _status("e2e-escalated-link") == Run.Status.ESCALATED,
        message="the run to escalate",
    )
    effect = Effect.objects.get(run_id="e2e-escalated-link", state=Effect.State.UNKNOWN)

    log_in(page, live_server.url, "bob", "/runs/e2e-escalated-link/")
    page.get_by_role("link", name="Resolve this escalation →").click()
    page.wait_for_url(f"**/escalations/#escalation-{effect.pk}")
    card = page.locator(f"#escalation-{effect.pk}")
    expect(card).to_contain_text(effect.idempotency_key)
    expect(card.get_by_role("button", name="It happened")).to_be_visible()
