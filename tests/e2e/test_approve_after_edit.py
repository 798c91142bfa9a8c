"""Approve after changing the edit form, in a real Chromium (issue 22): the reviewer
lowered the amount and pressed Approve instead of Edit and approve. The page refuses,
says why, and keeps the amount they typed; Edit and approve then approves it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.models import Approval
from tests.e2e.browser import log_in
from tests.web.test_approvals import _pending
from tests.web.test_reviewer_inbox import SCHEMA

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_approve_with_a_changed_amount_is_refused_and_keeps_it(page, live_server, alice):
    approval = _pending("e2e-approve-edit")
    Approval.objects.filter(pk=approval.pk).update(schema=SCHEMA)
    log_in(page, live_server.url, "alice", f"/approvals/{approval.pk}/")
    card = page.locator(f"#approval-{approval.pk}")
    card.get_by_text("Edit the values before approving").click()
    card.get_by_label("Cents").fill("5000")
    card.get_by_role("button", name="Approve", exact=True).click()

    expect(card.locator("[role=alert]")).to_contain_text("approves the payload as first shown")
    expect(card.get_by_label("Cents")).to_have_value("5000")
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING

    card.get_by_role("button", name="Edit and approve").click()
    expect(card).to_contain_text("Edited and approved by alice")
    assert Approval.objects.get(pk=approval.pk).edited_payload["cents"] == 5000
