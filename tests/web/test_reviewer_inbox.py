"""The inbox's filters, history and polling; the schema form read back; respond and
claim; the Markdown summary; retention tokens; where people land. Hostile input
gets a clear 4xx and changes nothing."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from durableruns.models import Approval, AuditEvent, RetentionPolicy, Run
from durableruns.services import approvals as service
from durableruns.web import schema_form
from tests.admin.factories import make_run
from tests.web.test_approvals import _pending, rung  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"const": "A-1002"},
        "cents": {"type": "integer", "minimum": 1, "maximum": 25_000, "x-display": "cents"},
        "speed": {"enum": ["slow", "fast"]},
    },
    "required": ["order_id", "cents"],
}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _with_schema(run_id: str = "r-s") -> Approval:
    approval = _pending(run_id)
    Approval.objects.filter(pk=approval.pk).update(schema=SCHEMA)
    return Approval.objects.select_related("run").get(pk=approval.pk)


def test_it_filters_by_agent_text_and_starter_and_pages(alice, bob):
    for index in range(23):
        _pending(f"r-{index:02d}", created_by=bob if index == 5 else None)
    client = _client(alice)
    first = client.get(reverse("approvals")).content.decode()
    assert first.count('<article class="approval') == 20 and "Page 1 of 2" in first
    assert "r-00" in first and "r-22" not in first  # oldest first
    newest = client.get(reverse("approvals"), {"sort": "newest"}).content.decode()
    assert "r-22" in newest
    body = client.get(reverse("approvals"), {"started_by": "bob"}).content.decode()
    assert body.count('<article class="approval') == 1 and "r-05" in body
    body = client.get(reverse("approvals"), {"q": "r-07"}).content.decode()
    assert body.count('<article class="approval') == 1
    body = client.get(reverse("approvals"), {"agent": "nobody"}).content.decode()
    assert "that match these filters" in body


def test_it_ignores_hostile_filter_values(alice):
    _pending()
    client = _client(alice)
    for query in (
        {"age": "'; drop table"},
        {"sort": "\x00"},
        {"view": "x" * 10_000},
        {"page": "-1"},
    ):
        response = client.get(reverse("approvals"), query)
        assert response.status_code in (200, 400), query
    # A lone surrogate, percent-encoded as a browser could send it.
    assert client.get(reverse("approvals") + "?q=%ED%A0%80").status_code in (200, 400)


def test_the_history_shows_decisions_newest_first(alice):
    first, second = _pending("r-a"), _pending("r-b")
    service.decide(first, "approve", user=alice)
    service.decide(second, "reject", user=alice, comment="no stock")
    body = _client(alice).get(reverse("approvals"), {"view": "history"}).content.decode()
    assert body.index(f'id="approval-{second.pk}"') < body.index(f'id="approval-{first.pk}"')
    assert "no stock" in body and "<time datetime=" in body


def test_the_poll_returns_only_approvals_newer_than_the_page(alice):
    old = _pending("r-old")
    new = _pending("r-new")
    response = _client(alice).get(
        reverse("approvals"), {"after": str(old.pk)}, headers={"HX-Request": "true"}
    )
    body = response.content.decode()
    assert f'id="approval-{new.pk}"' in body and f'id="approval-{old.pk}"' not in body
    assert 'hx-swap-oob="beforeend:#inbox-cards"' in body
    assert f"after={new.pk}" in body


def test_a_reject_needs_a_reason_and_changes_nothing_without_one(alice):
    approval = _pending()
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]), {"decision": "reject", "comment": "  "}
    )
    assert response.status_code == 400
    assert "a rejection needs a reason" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING
    assert not AuditEvent.objects.exists()


def test_the_schema_form_is_read_back_with_types_and_unknown_keys_kept(alice):
    approval = _with_schema()
    fields = schema_form.fields_for(approval.schema, approval.payload)
    kinds = {f.name: f for f in fields}  # jsonb keeps no key order
    assert {n: f.kind for n, f in kinds.items()} == {
        "order_id": "const",
        "cents": "integer",
        "speed": "enum",
    }
    cents = kinds["cents"]
    assert cents.limits == "at least 1, at most 25,000" and cents.amount == "250.00"
    payload = schema_form.payload_from(
        fields, {"field.cents": "20,000", "field.speed": "fast"}, {**approval.payload, "x": 1}
    )
    assert payload == {"order_id": "A-1002", "cents": 20_000, "speed": "fast", "x": 1}


@pytest.mark.parametrize(
    ("cents", "said"),
    [
        ("30000", "at most 25,000"),
        ("1e400", "is not a whole number"),
        ("9" * 5000, "at most 25,000"),
        ("\x00", "NUL character"),  # refused by the validation layer first
        ("", "is not a whole number"),
    ],
)
def test_a_refused_form_value_says_why_and_stays_pending(alice, cents, said):
    approval = _with_schema()
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]),
        {"decision": "edit", "field.cents": cents, "field.order_id": "A-1002"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 400
    assert said in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING


def test_the_form_cannot_change_a_constant(alice):
    approval = _with_schema()
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]),
        {"decision": "edit", "field.cents": "100", "field.order_id": "A-9999"},
    )
    assert response.status_code == 400
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING


def test_the_card_shows_the_edited_values_after_edit_and_approve(alice):
    approval = _with_schema()
    client = _client(alice)
    client.post(
        reverse("decide_approval", args=[approval.pk]),
        {"decision": "edit", "field.cents": "100", "field.order_id": "A-1002"},
    )
    body = client.get(reverse("approval", args=[approval.pk])).content.decode()
    assert "Approved with the edited values" in body and "&quot;cents&quot;: 100" in body
    assert "If approved, the agent calls" not in body


def test_respond_needs_the_agent_to_allow_it_and_words(alice):
    approval = _pending()
    with pytest.raises(service.DecisionRefused, match="does not allow 'respond'"):
        service.decide(approval, "respond", user=alice, comment="ship it")
    Approval.objects.filter(pk=approval.pk).update(allowed=["approve", "respond"])
    approval.refresh_from_db()
    with pytest.raises(service.DecisionRefused, match="write the answer"):
        service.decide(approval, "respond", user=alice, comment="")
    answered = service.decide(approval, "respond", user=alice, comment="ship from Leeds")
    assert answered.state == Approval.State.RESPONDED
    assert AuditEvent.objects.get().action == "approval.respond"


def test_ignore_is_offered_only_when_allowed_and_needs_no_words(alice):
    approval = _pending()
    client = _client(alice)
    card = reverse("approval", args=[approval.pk])
    assert 'value="ignore"' not in client.get(card).content.decode()
    Approval.objects.filter(pk=approval.pk).update(allowed=["approve", "reject", "ignore"])
    assert 'value="ignore">Ignore</button>' in client.get(card).content.decode()
    response = client.post(
        reverse("decide_approval", args=[approval.pk]),
        {"decision": "ignore"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200 and "Ignored: " in response.content.decode()
    assert "Ignored by <strong>alice</strong>" in client.get(card).content.decode()
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.IGNORED


def test_a_claim_keeps_other_reviewers_out_until_an_admin_reassigns(
    alice, carol, django_user_model
):
    erin = django_user_model.objects.create_user("erin")
    from durableruns import roles

    roles.grant(erin, roles.REVIEWER)
    approval = _pending()
    claimed = service.claim(approval, user=alice, assignee=alice)
    with pytest.raises(service.ClaimedByOther):
        service.claim(claimed, user=erin, assignee=erin)
    with pytest.raises(service.ClaimedByOther, match="claimed by alice"):
        service.decide(claimed, "approve", user=erin)
    with pytest.raises(service.DecisionRefused, match="only an admin"):
        service.claim(claimed, user=alice, assignee=erin)
    moved = service.claim(claimed, user=carol, assignee=erin)
    assert moved.claimed_by == erin
    assert service.decide(moved, "approve", user=erin).state == Approval.State.APPROVED
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["approval.claim", "approval.claim", "approval.approve"]


def test_the_markdown_summary_is_sanitised(alice):
    hostile = "**ok** <script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror=1>"
    approval = _pending(summary=hostile)
    body = _client(alice).get(reverse("approval", args=[approval.pk])).content.decode()
    summary = re.search(r'<div class="summary">(.*?)</div>', body, re.S).group(1)
    assert "<strong>ok</strong>" in summary
    assert "<script" not in summary and "<img" not in summary
    assert 'href="javascript' not in summary  # left as inert text, never a link
    assert "<img" not in summary


def test_reviewers_land_on_the_inbox_and_operators_on_the_runs(alice, bob):
    assert _client(alice).get(reverse("home"))["Location"] == reverse("approvals")
    assert _client(bob).get(reverse("home"))["Location"] == reverse("runs")


def test_old_admin_links_redirect_to_manage(carol):
    response = _client(carol).get("/admin/policies/?x=1")
    assert response.status_code == 301 and response["Location"] == "/manage/policies/?x=1"


def test_a_policy_save_is_refused_when_runs_changed_since_the_preview(client, carol):
    make_run("f1", Run.Status.FAILED)
    client.force_login(carol)
    form = {"name": "p", "statuses": ["failed"], "age_days": "30", "action": "delete"}
    preview = client.post(reverse("policy-create"), {**form, "confirm": "preview"})
    token = re.search(r'name="preview_token" value="([^"]+)"', preview.content.decode())[1]
    make_run("f2", Run.Status.FAILED)  # the data changes after the preview
    response = client.post(
        reverse("policy-create"), {**form, "confirm": "save", "preview_token": token}
    )
    assert response.status_code == 409
    assert "would delete 2 runs" in response.content.decode()
    assert not RetentionPolicy.objects.exists()


def test_apply_now_without_a_confirmed_token_deletes_nothing(client, carol):
    make_run("f1", Run.Status.FAILED)
    RetentionPolicy.objects.create(name="p", statuses=["failed"], age_days=30, action="delete")
    client.force_login(carol)
    for token in ("", "forged", "x" * 5000):
        response = client.post(reverse("policies-apply"), {"preview_token": token})
        assert response.status_code == 409
    assert Run.objects.filter(pk="f1").exists()


# The form as a browser submits it untouched: every field, the first choice of a select
# with nothing selected, and the empty raw-JSON box.
AS_SHOWN = {
    "field.order_id": "A-1002",
    "field.cents": "25000",
    "field.speed": "slow",
    "payload": "",
}


def test_approve_after_changing_a_field_refuses_and_keeps_the_typed_value(alice):
    approval = _with_schema()
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]),
        {**AS_SHOWN, "decision": "approve", "field.cents": "5000"},
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "Edit and approve" in body and "approves the payload as first shown" in body
    assert re.search(r'name="field.cents" value="5000"', body), "the typed value is kept"
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING
    assert not AuditEvent.objects.exists()


def test_approve_after_changing_the_raw_json_refuses_too(alice):
    approval = _pending("r-raw")
    typed = '{"order_id": "A-1002", "cents": 5000}'
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]),
        {"decision": "approve", "payload": typed},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 400
    assert "5000" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING


def test_approve_with_the_form_as_shown_approves_the_payload_as_shown(alice):
    approval = _with_schema()
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]), {**AS_SHOWN, "decision": "approve"}
    )
    assert response.status_code == 302
    decided = Approval.objects.get(pk=approval.pk)
    assert decided.state == Approval.State.APPROVED and decided.edited_payload is None


def test_approve_with_the_raw_json_as_shown_approves(alice):
    approval = _pending("r-raw")
    shown = '{\n  "cents": 25000,\n  "order_id": "A-1002"\n}'
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]), {"decision": "approve", "payload": shown}
    )
    assert response.status_code == 302
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.APPROVED


def test_the_api_refuses_approve_with_a_changed_payload(alice):
    approval = _pending("r-api")
    response = _client(alice).post(
        f"/api/approvals/{approval.pk}/decide/",
        {"decision": "approve", "payload": {"order_id": "A-1002", "cents": 5000}},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert '"edit"' in response.json()["detail"]
    assert Approval.objects.get(pk=approval.pk).state == Approval.State.PENDING


def test_the_inbox_finds_a_run_id_prefix_and_a_langgraph_thread_id(alice):
    from durableruns.models import LangGraphThread

    _pending("appr-7f3a")
    _pending("other-run")
    thread_run = _pending("lg-00c0ffee").run
    Run.objects.filter(pk=thread_run.pk).update(kind=Run.Kind.LANGGRAPH)
    LangGraphThread.objects.create(run=thread_run, thread_id_bytes=b"refund-A-1")
    client = _client(alice)

    def found(q: str) -> set[str]:
        body = client.get(reverse("approvals"), {"q": q}).content.decode()
        return {run for run in ("appr-7f3a", "other-run", "lg-00c0ffee") if run in body}

    assert found("appr-") == {"appr-7f3a"}
    assert found("lg-00c0") == {"lg-00c0ffee"}  # the LangGraph run id, as Runs shows it
    assert found("refund-A-1") == {"lg-00c0ffee"}  # the thread id the agent's code used
    assert found("refund-A") == set()  # a thread id is matched whole, not as a prefix


def test_the_run_page_shows_an_answer_as_answered_with_its_summary_rendered(alice):
    approval = _pending("r-answered", summary="Ship from **Leeds** or York?")
    Approval.objects.filter(pk=approval.pk).update(allowed=["approve", "respond"])
    service.decide(
        Approval.objects.get(pk=approval.pk), "respond", user=alice, comment="ship from Leeds"
    )
    body = _client(alice).get(reverse("run", args=["r-answered"])).content.decode()
    row = re.search(r'<li class="approval-row.*?</li>', body, re.S).group(0)
    assert "Rejected" not in row
    assert "Answered by <strong>alice</strong>" in row
    assert "<strong>Leeds</strong>" in row and "**Leeds**" not in row
    assert "ship from Leeds" in row


@pytest.mark.parametrize(
    ("cents", "said"), [("12.50", "is not a whole number"), ("30000", "at most 25,000")]
)
@pytest.mark.parametrize("htmx", [True, False])
def test_a_refused_form_value_is_kept_and_marked_at_its_field(alice, cents, said, htmx):
    approval = _with_schema()
    response = _client(alice).post(
        reverse("decide_approval", args=[approval.pk]),
        {"decision": "edit", "field.cents": cents, "field.order_id": "A-1002"},
        headers={"HX-Request": "true"} if htmx else {},
    )
    assert response.status_code == 400
    body = response.content.decode()
    field_id = f"f-{approval.pk}-cents"
    tag = re.search(rf'<input[^>]* id="{field_id}"[^>]*>', body).group(0)
    assert f'value="{cents}"' in tag  # what the reviewer typed, not the agent's value
    assert 'aria-invalid="true"' in tag and f"{field_id}-error" in tag
    error = re.search(rf'<p [^>]*id="{field_id}-error"[^>]*>(.*?)</p>', body, re.S).group(1)
    assert said in error
    other = re.search(rf'<input[^>]* id="f-{approval.pk}-order_id"[^>]*>', body).group(0)
    assert "aria-invalid" not in other
