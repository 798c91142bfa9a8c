"""At 390 px the pages people open on a phone fit its width (wide tables scroll inside
their own box, never the page); at 1366 px a run id is never broken across lines."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.engine import executor
from durableruns.engine.runs import start_run
from durableruns.models import Run
from tests.admin.factories import make_run
from tests.e2e.a11y import PHONE, assert_accessible, assert_fits_a_phone
from tests.e2e.browser import log_in
from tests.engine import agents as engine_agents  # registers t-echo-twice in this process

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
LONG = "demo-refund-kettle-order-A-100234-" + "x" * 24
ESCALATED = "refund_lost_answer_" + "x" * 30
assert engine_agents


def _sealed_run() -> Run:
    """A finished run whose step result holds a sealed secret (the secrets page lists it)."""
    run, _ = start_run("t-echo-twice", {"value": {"api_key": "sk_live_" + "Q7" * 12}}, run_id=LONG)
    for _ in range(10):
        if Run.objects.get(pk=run.id).status not in Run.EXECUTABLE:
            break
        # The agent fails one step once on purpose: skip its retry's wait.
        Run.objects.filter(pk=run.id).update(wake_at=None)
        executor.advance(run.id)
    return Run.objects.get(pk=run.id)


def test_runs_a_run_page_and_its_secrets_fit_a_phone(page, live_server, carol, tmp_path):
    for n in range(3):
        make_run(f"{LONG}-{n}", Run.Status.SUCCEEDED)
    run = _sealed_run()
    assert run.status == Run.Status.SUCCEEDED, run.error
    page.set_viewport_size(PHONE)

    log_in(page, live_server.url, "carol", "/")
    expect(page.locator("table").first).to_contain_text(LONG[:20])
    assert_fits_a_phone(page, "runs page", "runs", tmp_path)
    page.goto(f"{live_server.url}/runs/{LONG}-0/")
    expect(page.locator("#run-status")).to_have_text("Succeeded")
    assert_fits_a_phone(page, "run page", "run", tmp_path)
    assert_accessible(page, "run page at 390 px")
    # No hyphen to break at: an idempotency key is one long word.
    make_run(ESCALATED, Run.Status.ESCALATED, effect_state="unknown")
    page.goto(f"{live_server.url}/runs/{ESCALATED}/")
    expect(page.locator("#pending")).to_contain_text("may or may not have happened")
    assert_fits_a_phone(page, "escalated run page", "run-escalated", tmp_path)
    page.goto(f"{live_server.url}/runs/{run.id}/secrets/")
    expect(page.locator("main")).to_contain_text("api_key")
    assert_fits_a_phone(page, "secrets page", "secrets", tmp_path)
    assert_accessible(page, "secrets page at 390 px")


BREAKS = """() => [...document.querySelectorAll('td.run-id code')].map((el) => {
  const text = el.firstChild, range = document.createRange(), breaks = [];
  let top = null;
  for (let i = 0; i < text.length; i++) {
    range.setStart(text, i); range.setEnd(text, i + 1);
    const y = range.getBoundingClientRect().top;
    if (top !== null && y > top + 1) breaks.push(text.data[i - 1]);
    top = y;
  }
  return [text.data, breaks];
})"""


def test_run_ids_break_only_at_a_hyphen_on_a_laptop(page, live_server, bob):
    """A demo's ids read on one line at 1366 px; a longer one breaks after a hyphen,
    never mid-word (it read "demo-refund-kettl e")."""
    short = ["demo-replacement", "demo-research-assistant", "demo-refund-kettle"]
    for run_id in [*short, LONG[:40]]:
        make_run(run_id, Run.Status.SUCCEEDED)
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, live_server.url, "bob", "/")
    breaks = dict(page.evaluate(BREAKS))
    assert all(breaks[run_id] == [] for run_id in short), breaks
    assert set(breaks[LONG[:40]]) <= {"-"}, breaks
