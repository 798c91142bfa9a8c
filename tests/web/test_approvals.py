"""The reviewers' inbox and the decision form: roles, CSRF, escaping, races, htmx."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from durableruns.engine import doorbell
from durableruns.models import Approval, AuditEvent, Run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def rung(monkeypatch) -> list[str]:
    rings: list[str] = []
    monkeypatch.setattr(doorbell, "ring", lambda run_id, countdown=None: rings.append(run_id))
    return rings


def _pending(
    run_id: str = "r-1",
    *,
    payload=None,
    summary: str = "Refund 250.00",
    created_by=None,
    four_eyes: bool = False,
    age: float = 0,
) -> Approval:
    run = Run.objects.create(
        id=run_id,
        agent="refund-bot",
        agent_version="1",
        input={},
        status=Run.Status.AWAITING_APPROVAL,
        max_steps=10,
        max_duration_seconds=60,
        created_by=created_by,
    )
    approval = Approval.objects.create(
        run=run,
        position=2,
        name="approve-refund",
        summary=summary,
        payload={"order_id": "A-1002", "cents": 25_000} if payload is None else payload,
        allowed=["approve", "reject", "edit"],
        four_eyes=four_eyes,
        guards={"tool": "refund", "args": {"cents": 25_000}},
    )
    if age:
        Approval.objects.filter(pk=approval.pk).update(
            created_at=timezone.now() - timedelta(seconds=age)
        )
    return approval


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _decide(client: Client, approval: Approval, decision: str, *, headers=None, **data) -> object:
    url = reverse("decide_approval", args=[approval.pk])
    return client.post(url, {"decision": decision, **data}, **(headers or {}))


def _state(approval: Approval) -> str:
    return Approval.objects.get(pk=approval.pk).state


def test_it_lists_pending_approvals_oldest_first(alice):
    _pending("r-new", summary="the newer one")
    _pending("r-old", summary="the older one", age=600)
    page = _client(alice).get(reverse("approvals")).content.decode()
    assert page.index("the older one") < page.index("the newer one")
    assert 'Approvals (<span id="pending-count">2</span>)' in page
    assert "If approved, the agent calls <code>refund</code>" in page


def test_it_approves_and_redirects_with_what_happened(alice, rung):
    approval = _pending()
    client = _client(alice)
    response = _decide(client, approval, "approve", comment="ok")
    assert response.status_code == 302
    assert _state(approval) == Approval.State.APPROVED
    assert Run.objects.get(pk="r-1").status == Run.Status.QUEUED
    assert rung == ["r-1"]
    event = AuditEvent.objects.get()
    assert (event.actor_name, event.action) == ("alice", "approval.approve")
    assert event.before["payload"] == {"cents": 25_000, "order_id": "A-1002"}
    page = client.get(response.url).content.decode()
    assert "Approved: approve-refund (run r-1)." in page


def test_it_tells_the_second_reviewer_who_already_decided(alice, carol):
    approval = _pending()
    _decide(_client(alice), approval, "approve")
    client = _client(carol)
    response = _decide(client, approval, "reject")
    page = client.get(response.url).content.decode()
    assert "Nothing changed: already approved by alice at" in page
    assert _state(approval) == Approval.State.APPROVED
    assert AuditEvent.objects.count() == 1


def test_it_swaps_the_decided_card_in_place_for_htmx(alice):
    approval = _pending()
    response = _decide(
        _client(alice), approval, "reject", comment="too much", headers={"HTTP_HX_REQUEST": "true"}
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith(
        f'<article class="approval approval-rejected" id="approval-{approval.pk}"'
    )
    assert "Rejected by <strong>alice</strong>" in body
    assert '<span id="pending-count" hx-swap-oob="true">0</span>' in body


def test_it_keeps_an_invalid_edit_pending_and_says_why(alice):
    approval = _pending()
    response = _decide(_client(alice), approval, "edit", payload="[1, 2]")
    assert response.status_code == 400
    assert "must be a JSON object" in response.content.decode()
    assert _state(approval) == Approval.State.PENDING


def test_it_forbids_operators_to_decide(bob):
    approval = _pending()
    assert _decide(_client(bob), approval, "approve").status_code == 403
    assert _state(approval) == Approval.State.PENDING
    assert not AuditEvent.objects.exists()


def test_it_hides_decision_buttons_and_the_inbox_link_from_operators(bob):
    approval = _pending()
    page = _client(bob).get(reverse("approval", args=[approval.pk])).content.decode()
    assert "A-1002" in page
    assert 'value="approve"' not in page
    assert "Approvals (" not in page


def test_it_hides_approve_from_the_run_creator_under_four_eyes(alice):
    approval = _pending(created_by=alice, four_eyes=True)
    page = _client(alice).get(reverse("approvals")).content.decode()
    assert 'value="approve"' not in page
    assert 'value="reject"' in page
    assert _decide(_client(alice), approval, "approve").status_code == 403


def test_it_forbids_users_without_a_role(dave):
    client = _client(dave)
    for url in (reverse("approvals"), reverse("runs"), reverse("run", args=["r-1"])):
        assert client.get(url).status_code == 403


def test_it_sends_anonymous_visitors_to_log_in():
    approval = _pending()
    response = Client().post(
        reverse("decide_approval", args=[approval.pk]), {"decision": "approve"}
    )
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))
    assert _state(approval) == Approval.State.PENDING


def test_it_enforces_csrf_on_decision_forms(alice):
    approval = _pending()
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    url = reverse("decide_approval", args=[approval.pk])
    assert client.post(url, {"decision": "approve"}).status_code == 403
    assert _state(approval) == Approval.State.PENDING
    client.get(reverse("approvals"))  # the page sets the token cookie, as a browser sees it
    token = client.cookies["csrftoken"].value
    response = client.post(url, {"decision": "approve", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert _state(approval) == Approval.State.APPROVED


def test_it_shows_html_in_payloads_and_summaries_as_text(alice):
    script = "<script>alert('pwned')</script>"
    approval = _pending(payload={"note": script, "<b>key</b>": 1}, summary=f"Hi {script}")
    for url in (reverse("approvals"), reverse("run", args=[approval.run_id])):
        page = _client(alice).get(url).content.decode()
        assert script not in page
        assert "<b>key</b>" not in page
        assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page


def test_it_shows_approvals_and_the_audit_trail_on_the_run_page(alice, bob):
    approval = _pending()
    _decide(
        _client(alice),
        approval,
        "edit",
        payload='{"order_id": "A-1002", "cents": 100}',
        comment="partial refund",
    )
    page = _client(bob).get(reverse("run", args=["r-1"])).content.decode()
    assert "Audit trail" in page
    assert "approval.edit" in page
    assert "partial refund" in page
    assert "Payload as approved (edited)" in page
