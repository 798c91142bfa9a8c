"""Reviewers work from the inbox in a real Chromium, with real workers: filters and
history, approvals arriving without a reload, the schema form, respond and claim, and
sandbox forks marked wherever a person sees them. Each page also passes axe-core
(no serious or critical violation) and fits a 390 px phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.demo.models import ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Approval, Run, Step
from durableruns.services import approvals as approval_service
from durableruns.services import runs as run_service
from tests.conftest import wait_for
from tests.e2e.a11y import PHONE, assert_accessible, assert_fits_a_phone, shoot
from tests.e2e.browser import log_in
from tests.web import agents as _test_agents  # noqa: F401 - registers t-ask here too

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AGENT_MODULES = {"DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.web.agents"}


def _awaiting(run_id: str) -> Approval:
    return wait_for(
        lambda: Approval.objects.filter(run_id=run_id, run__status="awaiting_approval").first(),
        message=f"{run_id} to await approval",
    )


def _refund(run_id: str, user=None) -> Approval:
    start_run("refund-bot", {"order_id": "A-1002"}, run_id=run_id, user=user)
    return _awaiting(run_id)


def test_a_reviewer_lands_on_the_inbox_filters_it_and_finds_a_decision_in_history(
    page, processes, live_server, alice, bob, tmp_path
):
    processes.worker(extra_env=AGENT_MODULES)
    refund = _refund("e2e-inbox-refund", user=bob)
    ask = start_run("t-ask", {"order": "A-7"}, run_id="e2e-inbox-ask")[0]
    _awaiting(ask.id)

    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-password-1")
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{live_server.url}/approvals/")  # reviewers land on the inbox
    expect(page.locator("nav[aria-label=Main] a[aria-current=page]")).to_contain_text("Approvals")
    cards = page.locator("#inbox-cards > article")
    expect(cards).to_have_count(2)
    expect(page.locator("body")).not_to_contain_text("{#")  # no template comment leaks

    page.get_by_label("Agent").select_option("t-ask")
    page.get_by_role("button", name="Filter").click()
    expect(cards).to_have_count(1)
    expect(cards.first).to_contain_text("ask-warehouse")
    expect(cards.first.locator(".summary strong")).to_have_text("warehouse")  # Markdown

    page.goto(f"{live_server.url}/approvals/?started_by=bob")
    expect(cards).to_have_count(1)
    card = page.locator(f"#approval-{refund.pk}")
    assert_accessible(page, "inbox")
    shoot(page, "inbox", tmp_path)
    assert_fits_a_phone(page, "inbox", "inbox", tmp_path)
    _assert_one_screen_tall(page, card)

    # Reject needs a reason: refused with the real status, the error swapped in by htmx.
    card.get_by_role("button", name="Reject").click()
    expect(card.locator("[role=alert]")).to_contain_text("a rejection needs a reason")
    card.get_by_label("Comment, reason or answer").fill("duplicate of A-1001")
    card.get_by_role("button", name="Reject").click()
    expect(card).to_contain_text("Rejected by alice")

    page.get_by_role("link", name="History (decided)").click()
    page.get_by_label("Search").fill("e2e-inbox-refund")
    page.get_by_role("button", name="Filter").click()
    found = page.locator(f"#approval-{refund.pk}")
    expect(found).to_contain_text("Rejected by alice")
    expect(found.locator("blockquote.comment")).to_have_text("duplicate of A-1001")
    expect(found.locator("time")).to_have_count(2)  # asked, decided: <time datetime>
    expect(page.locator("#inbox-cards > article")).to_have_count(1)


def test_a_new_approval_appears_without_a_reload(page, processes, live_server, alice):
    processes.worker()
    log_in(page, live_server.url, "alice", "/approvals/")
    expect(page.locator(".empty")).to_contain_text("Nothing is waiting")
    page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded

    approval = _refund("e2e-arrives")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("Refund 250.00 for order A-1002", timeout=15_000)
    expect(page.locator("#pending-count")).to_have_text("1")
    expect(page.locator("#inbox-news")).to_have_text("1 new approval")
    assert page.evaluate("window.loadedOnce") is True


def _refunded_cents(run_id: str) -> list[int]:
    rows = ProviderCall.objects.filter(
        provider="payments",
        idempotency_key__startswith=run_id,
        outcome=ProviderCall.Outcome.EXECUTED,
    )
    return [call["cents"] for call in rows.values_list("payload", flat=True)]


def test_a_reviewer_edits_through_the_schema_form_and_sees_the_limit(
    page, processes, live_server, alice, tmp_path
):
    processes.worker()
    approval = _refund("e2e-schema")
    log_in(page, live_server.url, "alice", f"/approvals/{approval.pk}/")
    card = page.locator(f"#approval-{approval.pk}")
    card.get_by_text("Edit the values before approving").click()
    amount = card.get_by_label("Amount (cents)")
    expect(amount).to_have_value("25000")
    help_text = card.locator(f"#f-{approval.pk}-cents-help")
    expect(help_text).to_contain_text("What to refund, in cents")
    expect(help_text).to_contain_text("At least 1, at most 25,000.")
    expect(help_text).to_contain_text("Shown now: 250.00")
    expect(card.get_by_label("Order id")).to_have_attribute("readonly", "")
    assert_accessible(page, "approval page")
    shoot(page, "schema-form", tmp_path)
    assert_fits_a_phone(page, "approval page", "schema-form", tmp_path)

    # The amount in currency units follows the typing, before anything is sent.
    amount.fill("1234567")
    expect(help_text.locator(".amount")).to_have_text("Shown now: 12,345.67 (in currency units).")
    amount.fill("30000")
    expect(help_text.locator(".amount")).to_have_text("Shown now: 300.00 (in currency units).")
    card.get_by_role("button", name="Edit and approve").click()
    alert = page.locator(f"#approval-{approval.pk} [role=alert]")
    expect(alert).to_contain_text("at most 25,000")
    expect(alert).to_be_focused()  # focus follows the swap to the error, not the page top
    amount = page.locator(f"#approval-{approval.pk}").get_by_label("Amount (cents)")
    expect(amount).to_have_value("30000")  # what the reviewer typed is kept
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING

    # A decimal where whole cents are asked for: kept as typed, marked, said beside it.
    amount.fill("12.50")
    page.locator(f"#approval-{approval.pk}").get_by_role("button", name="Edit and approve").click()
    amount = page.locator(f"#approval-{approval.pk}").get_by_label("Amount (cents)")
    expect(amount).to_have_value("12.50")
    expect(page.locator(f"#f-{approval.pk}-cents-help .amount")).to_have_text("")
    expect(amount).to_have_attribute("aria-invalid", "true")
    expect(page.locator(f"#f-{approval.pk}-cents-error")).to_contain_text("not a whole number")
    assert_accessible(page, "approval page with a refused value")

    amount.fill("20000")
    page.locator(f"#approval-{approval.pk}").get_by_role("button", name="Edit and approve").click()
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("Edited and approved by alice")
    expect(card.locator("pre.payload-edited")).to_contain_text('"cents": 20000')
    expect(card).not_to_contain_text("If approved, the agent calls")
    wait_for(lambda: Run.objects.get(pk="e2e-schema").is_terminal, message="the run to finish")
    assert Run.objects.get(pk="e2e-schema").result["cents"] == 20_000
    assert _refunded_cents("e2e-schema") == [20_000]


def test_an_admin_reassigns_a_claimed_approval_and_answers_the_agent(
    browser, processes, live_server, alice, carol
):
    processes.worker(extra_env=AGENT_MODULES)
    start_run("t-ask", {"order": "A-9"}, run_id="e2e-respond")
    approval = _awaiting("e2e-respond")
    url = f"/approvals/{approval.pk}/"
    alice_tab = browser.new_context().new_page()
    carol_tab = browser.new_context().new_page()
    log_in(alice_tab, live_server.url, "alice", url)
    log_in(carol_tab, live_server.url, "carol", url)

    alice_card = alice_tab.locator(f"#approval-{approval.pk}")
    alice_card.get_by_role("button", name="Claim").click()
    expect(alice_card.locator(".claimed")).to_contain_text("Claimed by alice")

    carol_tab.reload()
    carol_card = carol_tab.locator(f"#approval-{approval.pk}")
    expect(carol_card.locator(".claimed")).to_contain_text("Claimed by alice")
    carol_card.get_by_label("Assign to").fill("carol")
    carol_card.get_by_role("button", name="Assign").click()
    expect(carol_card.locator(".claimed")).to_contain_text("Claimed by carol")

    alice_tab.reload()
    alice_card = alice_tab.locator(f"#approval-{approval.pk}")
    alice_card.get_by_label("Comment, reason or answer").fill("ship from Leeds")
    alice_card.get_by_role("button", name="Send answer").click()
    expect(alice_card.locator("[role=alert]")).to_contain_text("claimed by carol")
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING

    carol_card = carol_tab.locator(f"#approval-{approval.pk}")
    carol_card.get_by_label("Comment, reason or answer").fill("Ship from Bristol")
    carol_card.get_by_role("button", name="Send answer").click()
    expect(carol_card).to_contain_text("Answered by carol")
    wait_for(lambda: Run.objects.get(pk="e2e-respond").is_terminal, message="the run to finish")
    assert Run.objects.get(pk="e2e-respond").result == {
        "decision": "respond",
        "answer": "Ship from Bristol",
    }


def test_a_reviewer_ignores_a_request_and_nothing_is_paid(page, processes, live_server, alice):
    processes.worker(extra_env=AGENT_MODULES)
    start_run("t-ignorable", {}, run_id="e2e-ignore")
    approval = _awaiting("e2e-ignore")
    log_in(page, live_server.url, "alice", f"/approvals/{approval.pk}/")
    card = page.locator(f"#approval-{approval.pk}")
    card.get_by_role("button", name="Ignore", exact=True).click()
    expect(card).to_contain_text("Ignored by alice")
    wait_for(lambda: Run.objects.get(pk="e2e-ignore").is_terminal, message="the run to finish")
    assert Run.objects.get(pk="e2e-ignore").result == {"decision": "ignore", "paid": "not paid"}
    page.goto(f"{live_server.url}/runs/e2e-ignore/")
    expect(page.locator(".run-approvals")).to_contain_text("Ignored by alice")
    assert_accessible(page, "a run with an ignored request")


def test_a_sandbox_fork_is_marked_on_the_card_the_email_and_the_run_page(
    page, processes, live_server, alice, bob
):
    alice.email = "alice@example.com"
    alice.save(update_fields=["email"])
    processes.worker()
    first = _refund("e2e-real")
    approval_service.decide(first, "approve", user=alice)
    wait_for(lambda: Run.objects.get(pk="e2e-real").is_terminal, message="the parent run")
    position = Step.objects.get(run_id="e2e-real", kind="approval").position
    child = run_service.fork(Run.objects.get(pk="e2e-real"), position, user=bob, sandbox=True)
    approval = _awaiting(child.id)

    wait_for(
        lambda: "Subject: [SANDBOX] Approval needed: approve-refund" in processes.logs(),
        message="the worker to email reviewers about the sandbox approval",
    )
    assert "SANDBOX: this run is a sandboxed fork" in processes.logs()

    log_in(page, live_server.url, "alice", "/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card.locator(".badge-sandbox")).to_have_text("Sandbox")
    expect(card.locator(".sandbox-note")).to_contain_text("approving changes nothing outside")
    card.get_by_role("link", name=child.id).click()
    expect(page.locator("h1 .badge-sandbox")).to_have_text("Sandbox")
    expect(page.locator(".sandbox-note")).to_contain_text("write tools were not called")
    page.goto(f"{live_server.url}/runs/e2e-real/")
    expect(page.locator(".badge-sandbox")).to_have_count(0)  # the real run is not marked


def _assert_one_screen_tall(page, card) -> None:
    """On a phone a pending card (summary, payload, the decision buttons) fits one screen,
    so a reviewer scrolls between cards, not within one."""
    size = page.viewport_size
    page.set_viewport_size(PHONE)
    try:
        height = card.bounding_box()["height"]
    finally:
        page.set_viewport_size(size)
    assert height <= 0.9 * PHONE["height"], f"a pending card is {height:.0f} px tall at 390 px"
