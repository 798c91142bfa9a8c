"""The retention and redaction pages, and the legal hold: previews before saving,
the sweep log on the page, and every change audited."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from durableruns.engine.redaction import redact
from durableruns.models import AuditEvent, RedactionRule, RetentionPolicy, RetentionSweep, Run
from durableruns.services import retention
from tests.admin.factories import make_run, mixed_runs

pytestmark = pytest.mark.django_db

FORM = {
    "name": "drop-failed",
    "agent": "refund-bot",
    "statuses": ["failed", "cancelled"],
    "age_days": "30",
    "action": "delete",
    "enabled": "on",
}


def _token(response) -> str:
    """The preview token the confirmation carries (what a person's Save button sends)."""
    return re.search(r'name="preview_token" value="([^"]+)"', response.content.decode()).group(1)


def _previewed(client, url, form) -> dict:
    response = client.post(url, {**form, "confirm": "preview"})
    return {**form, "confirm": "save", "preview_token": _token(response)}


def test_it_previews_a_policy_before_saving_it(client, carol):
    mixed_runs()
    client.force_login(carol)
    response = client.post(reverse("policy-create"), {**FORM, "confirm": "preview"})
    assert response.status_code == 200
    assert "This policy alone: <strong>would delete 2 runs, redact 0</strong>" in (
        response.content.decode()
    )
    assert 'value="save"' in response.content.decode()
    assert not RetentionPolicy.objects.exists()

    token = _token(response)
    response = client.post(
        reverse("policy-create"), {**FORM, "confirm": "save", "preview_token": token}
    )
    assert response.status_code == 302
    policy = RetentionPolicy.objects.get()
    assert policy.statuses == ["failed", "cancelled"]
    event = AuditEvent.objects.get(action="policy.create")
    assert event.actor_name == "carol" and event.after["action"] == "delete"


def test_it_renders_the_preview_partial_for_htmx(client, carol):
    client.force_login(carol)
    response = client.post(
        reverse("policy-create"), {**FORM, "confirm": "preview"}, headers={"HX-Request": "true"}
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<form method="post"') and "would delete 0 runs" in body


def test_an_htmx_save_sends_the_browser_back_to_the_list(client, carol):
    client.force_login(carol)
    saved = _previewed(client, reverse("policy-create"), FORM)
    response = client.post(reverse("policy-create"), saved, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("policies")
    assert RetentionPolicy.objects.filter(name="drop-failed").exists()


def test_it_refuses_an_invalid_policy(client, carol):
    client.force_login(carol)
    response = client.post(
        reverse("policy-create"), {**FORM, "statuses": ["running"], "confirm": "save"}
    )
    assert response.status_code == 400
    assert not RetentionPolicy.objects.exists()


def test_it_edits_a_policy_with_a_preview_and_audits_the_change(client, carol):
    policy = RetentionPolicy.objects.create(
        name="p", statuses=["failed"], age_days=30, action="delete"
    )
    client.force_login(carol)
    assert client.get(policy.get_absolute_url()).status_code == 200
    url = reverse("policy-update", args=[policy.pk])
    saved = _previewed(client, url, {**FORM, "name": "p", "age_days": "90"})
    assert RetentionPolicy.objects.get().age_days == 30
    client.post(url, saved)
    assert RetentionPolicy.objects.get().age_days == 90
    event = AuditEvent.objects.get(action="policy.update")
    assert (event.before["age_days"], event.after["age_days"]) == (30, 90)


def test_it_deletes_a_policy_and_audits_it(client, carol):
    policy = RetentionPolicy.objects.create(
        name="p", statuses=["failed"], age_days=30, action="delete"
    )
    client.force_login(carol)
    client.post(reverse("policy-delete", args=[policy.pk]))
    assert not RetentionPolicy.objects.exists()
    assert AuditEvent.objects.get(action="policy.delete").before["name"] == "p"


def test_it_shows_the_overall_preview_and_the_sweep_log(client, carol):
    mixed_runs()
    RetentionPolicy.objects.create(
        name="drop", agent="refund-bot", statuses=["failed"], age_days=30, action="delete"
    )
    client.force_login(carol)
    body = client.get(reverse("policies")).content.decode()
    assert "would delete 1 runs, redact 0" in body

    confirm = client.get(reverse("policies-apply-confirm"))
    assert "would delete 1 runs, redact 0" in confirm.content.decode()
    client.post(reverse("policies-apply"), {"preview_token": _token(confirm)})
    assert not Run.objects.filter(pk="failed").exists()
    assert AuditEvent.objects.filter(action="retention.apply").exists()
    body = client.get(reverse("policies")).content.decode()
    sweep = RetentionSweep.objects.get()
    assert "<td>drop</td><td>delete</td><td>1</td>" in body
    assert sweep.triggered_by == "carol"


def test_an_operator_puts_a_run_on_hold_and_only_an_admin_clears_it(client, bob, carol):
    make_run("r1", Run.Status.SUCCEEDED)
    client.force_login(bob)
    hold = client.post(reverse("run-hold", args=["r1"]), {"reason": "case 42"})
    assert hold.status_code == 302
    assert Run.objects.get(pk="r1").legal_hold
    assert Run.objects.get(pk="r1").legal_hold_reason == "case 42"
    assert client.post(reverse("run-release", args=["r1"])).status_code == 403
    policy = RetentionPolicy.objects.create(
        name="all", statuses=["succeeded"], age_days=0, action="delete"
    )
    retention.apply(policy)
    assert Run.objects.filter(pk="r1").exists()

    client.force_login(carol)
    held = client.get(reverse("held-runs")).content.decode()
    assert "<td>case 42</td><td>bob</td>" in held  # who placed the hold (and when)
    client.post(reverse("run-release", args=["r1"]))
    assert not Run.objects.get(pk="r1").legal_hold
    actions = list(AuditEvent.objects.order_by("id").values_list("actor_name", "action"))
    assert actions == [("bob", "run.legal_hold"), ("carol", "run.legal_hold_clear")]


def test_the_run_page_offers_the_hold_only_to_those_who_may_set_it(client, alice, bob):
    make_run("r1", Run.Status.SUCCEEDED)
    url = reverse("run", args=["r1"])
    client.force_login(alice)
    assert "Put on legal hold" not in client.get(url).content.decode()
    client.force_login(bob)
    assert "Put on legal hold" in client.get(url).content.decode()


def test_an_admin_adds_a_redaction_rule_that_applies_at_once(client, carol):
    client.force_login(carol)
    assert redact({"employee_id": "E-1"}) == {"employee_id": "E-1"}
    client.post(reverse("redaction-rule-create"), {"kind": "key", "value": "employee_id"})
    client.post(
        reverse("redaction-rule-create"),
        {"kind": "pattern", "value": r"\bCASE-\d{6}\b", "note": "case numbers"},
    )
    assert redact({"employee_id": "E-1", "text": "see CASE-123456"}) == {
        "employee_id": "[REDACTED]",
        "text": "see [REDACTED]",
    }
    body = client.get(reverse("redaction-rules")).content.decode()
    assert "employee_id" in body and "case numbers" in body
    assert AuditEvent.objects.filter(action="redaction_rule.create").count() == 2

    rule = RedactionRule.objects.get(kind="key")
    client.post(reverse("redaction-rule-delete", args=[rule.pk]))
    assert redact({"employee_id": "E-1"}) == {"employee_id": "E-1"}
    event = AuditEvent.objects.get(action="redaction_rule.delete")
    assert event.before["value"] == "employee_id"


def test_it_refuses_an_invalid_pattern(client, carol):
    client.force_login(carol)
    response = client.post(reverse("redaction-rule-create"), {"kind": "pattern", "value": "(["})
    assert response.status_code == 400
    assert not RedactionRule.objects.exists()


def _run_with_input(run_id: str, value: dict) -> None:
    Run.objects.filter(pk=make_run(run_id, Run.Status.SUCCEEDED).pk).update(input=value)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("([", "missing ]"), ("(?=secret)", "invalid perl operator"), (r"(\w)\1", "\\1")],
)
def test_a_refused_pattern_is_explained_in_plain_words(client, carol, pattern, reason):
    client.force_login(carol)
    response = client.post(reverse("redaction-rule-create"), {"kind": "pattern", "value": pattern})
    assert response.status_code == 400
    error = response.context["form"].errors["value"][0]
    assert reason in error and "b'" not in error and 'b"' not in error
    assert "RE2" in error


def test_an_htmx_preview_of_a_refused_pattern_answers_with_the_preview_region_only(client, carol):
    client.force_login(carol)
    response = client.post(
        reverse("redaction-rule-preview"),
        {"kind": "pattern", "value": "(["},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="rule-preview"') and "<html" not in body
    assert "missing ]" in body


def test_the_help_text_names_the_syntax_the_rules_run_on(client, carol):
    client.force_login(carol)
    body = client.get(reverse("redaction-rules")).content.decode()
    assert "RE2" in body and "Python regular expression" not in body


def test_the_preview_runs_a_pattern_as_the_engine_does(client, carol):
    """`\\z` is RE2's end of text (Python's re refuses it): a rule that saves must preview."""
    _run_with_input("zz", {"note": "ends with CASE-42"})
    client.force_login(carol)
    response = client.post(
        reverse("redaction-rule-preview"), {"kind": "pattern", "value": r"\d+\z"}
    )
    assert response.status_code == 200
    assert response.context["found"].runs_matched == 1


@pytest.mark.timeout(30)
def test_the_preview_of_a_backtracking_pattern_is_linear(client, carol):
    """Python's re takes minutes on (a+)+$ against 5,000 a's and a "!"; RE2 milliseconds."""
    _run_with_input("redos", {"note": "a" * 5_000 + "!"})
    client.force_login(carol)
    response = client.post(
        reverse("redaction-rule-preview"), {"kind": "pattern", "value": "(a+)+$"}
    )
    assert response.status_code == 200
    assert response.context["found"].runs_matched == 0
