"""Reviewers decide in a real Chromium, and the run goes on in a real worker."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.demo.models import ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Approval, Run
from tests.conftest import wait_for
from tests.e2e.browser import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BIG_REFUND = {"order_id": "A-1002"}  # 250.00: above the approval threshold


def _awaiting_refund(processes, run_id: str) -> Approval:
    processes.worker()
    start_run("refund-bot", BIG_REFUND, run_id=run_id)
    return wait_for(
        lambda: Approval.objects.filter(run_id=run_id, run__status="awaiting_approval").first(),
        message="the refund to await approval",
    )


def _refunds(run_id: str) -> list[dict]:
    rows = ProviderCall.objects.filter(
        provider="payments",
        idempotency_key__startswith=run_id,
        outcome=ProviderCall.Outcome.EXECUTED,
    )
    return list(rows.values_list("payload", flat=True))


def test_it_lets_a_reviewer_approve_and_watch_the_run_finish(page, processes, live_server, alice):
    approval = _awaiting_refund(processes, "e2e-approve")
    log_in(page, live_server.url, "alice", "/approvals/")
    expect(page.locator("nav")).to_contain_text("Approvals (1)")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("Refund 250.00 for order A-1002 (bike) to grace@example.com")
    expect(card.locator("pre.payload")).to_contain_text('"cents": 25000')
    expect(card).to_contain_text("If approved, the agent calls refund")

    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_contain_text("Approved by alice")
    expect(page.locator("#pending-count")).to_have_text("0")

    card.get_by_role("link", name="Follow the run →").click()
    expect(page.locator("#run-live .status").first).to_have_text("Succeeded")
    expect(page.locator("#run-live")).to_contain_text("Approved by alice")
    assert [refund["cents"] for refund in _refunds("e2e-approve")] == [25_000]


def test_it_ends_the_run_as_the_agent_decides_on_reject(page, processes, live_server, alice):
    approval = _awaiting_refund(processes, "e2e-reject")
    log_in(page, live_server.url, "alice", "/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    card.locator("textarea[name=comment]").fill("the customer kept the bike")
    card.get_by_role("button", name="Reject").click()
    expect(card).to_contain_text("Rejected by alice")

    page.goto(f"{live_server.url}/runs/e2e-reject/")
    expect(page.locator("#run-live .status").first).to_have_text("Succeeded")
    expect(page.locator("#run-live")).to_contain_text('"refunded": false')  # JSON, pretty-printed
    expect(page.locator("#run-live")).to_contain_text("the customer kept the bike")
    assert _refunds("e2e-reject") == []


def test_it_gives_the_agent_the_payload_the_reviewer_edited(page, processes, live_server, alice):
    approval = _awaiting_refund(processes, "e2e-edit")
    log_in(page, live_server.url, "alice", "/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    card.get_by_text("Edit the values before approving").click()
    card.get_by_text("Raw JSON instead").click()  # the fallback for what a form cannot say
    card.locator("textarea[name=payload]").fill('{"order_id": "A-1002", "cents": 20000}')
    card.get_by_role("button", name="Edit and approve").click()
    expect(card).to_contain_text("Edited and approved by alice")

    wait_for(lambda: Run.objects.get(pk="e2e-edit").is_terminal, message="the run to finish")
    assert Run.objects.get(pk="e2e-edit").result["cents"] == 20_000
    assert [refund["cents"] for refund in _refunds("e2e-edit")] == [20_000]


def test_it_shows_operators_no_approve_button_and_refuses_their_post(
    page, processes, live_server, bob
):
    approval = _awaiting_refund(processes, "e2e-operator")
    log_in(page, live_server.url, "bob", f"/approvals/{approval.pk}/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card.locator("pre.payload")).to_contain_text('"cents": 25000')
    expect(card.get_by_role("button")).to_have_count(0)
    expect(page.locator("nav")).not_to_contain_text("Approvals")

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.context.request.post(
        f"{live_server.url}/approvals/{approval.pk}/decide/",
        form={"decision": "approve", "csrfmiddlewaretoken": token},
        headers={"Referer": page.url, "Origin": live_server.url},
    )
    assert response.status == 403
    assert "CSRF check failed" not in response.text()  # refused for the role, not the token
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING
