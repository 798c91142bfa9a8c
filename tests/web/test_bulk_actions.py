"""Bulk cancel, resume and fork from the runs list: a confirmation that says how many
and which filter, then a POST with a reason that changes exactly those runs, audited,
and redirects (or, with htmx, goes on batch by batch showing the progress)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from durableruns.models import AuditEvent, Run
from durableruns.web import actions
from tests.web import agents as _test_agents  # noqa: F401 - registers t-ledger
from tests.web.dashboard import make_run, make_step, rung_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db
URL = reverse("runs-bulk")


def _status(run_id: str) -> str:
    return Run.objects.get(pk=run_id).status


def test_it_confirms_how_many_selected_runs_would_be_cancelled(client, bob):
    make_run("a", status="running")
    make_run("b", status="waiting")
    make_run("c", status="succeeded")
    client.force_login(bob)
    response = client.get(URL, {"do": "cancel:selected", "run": ["a", "b", "c"]})
    body = response.content.decode()
    assert response.status_code == 200
    assert "Cancel 2 runs?" in body
    assert "You selected 3 runs" in body
    assert _status("a") == "running"  # nothing changes before the confirmation


def test_it_cancels_the_selected_runs_and_audits_each(client, bob):
    make_run("a", status="running")
    make_run("b", status="queued")
    make_run("untouched", status="running")
    client.force_login(bob)
    response = client.post(
        URL, {"do": "cancel:selected", "run": ["a", "b"], "reason": "stuck"}, follow=True
    )
    assert response.redirect_chain[-1][0].startswith(reverse("runs"))
    assert "Cancel: 2 runs changed." in response.content.decode()
    assert (_status("a"), _status("b"), _status("untouched")) == (
        "cancelled",
        "cancelled",
        "running",
    )
    events = AuditEvent.objects.filter(action="run.cancel").values_list("target_id", "actor_name")
    assert sorted(events) == [("a", "bob"), ("b", "bob")]


def test_it_resumes_every_run_matching_the_filter(
    client, bob, rung, django_capture_on_commit_callbacks
):
    make_run("f1", status="failed", agent="refund-bot")
    make_run("f2", status="failed", agent="refund-bot")
    make_run("other-agent", status="failed", agent="research-bot")
    client.force_login(bob)
    query = {"do": "resume:filtered", "status": "failed", "agent": "refund-bot"}
    confirm = client.get(URL, query).content.decode()
    assert "Resume 2 runs?" in confirm
    assert (
        '2 runs match <strong class="filter-words">'
        "status is failed; agent is &#x27;refund-bot&#x27;</strong>" in confirm
    )
    waiting = client.get(URL, {**query, "status": "awaiting_approval"}).content.decode()
    assert "status is awaiting approval;" in waiting  # the label, not the stored value
    with django_capture_on_commit_callbacks(execute=True):
        client.post(URL, {**query, "reason": "provider is back"})
    assert (_status("f1"), _status("f2"), _status("other-agent")) == ("queued", "queued", "failed")
    assert sorted(rung) == ["f1", "f2"]


def test_it_counts_only_runs_that_can_be_resumed(client, bob):
    make_run("running", status="running")
    make_run("failed", status="failed")
    client.force_login(bob)
    body = client.get(URL, {"do": "resume:filtered"}).content.decode()
    assert "Resume 1 run?" in body


@pytest.mark.parametrize("method", ["get", "post"])
def test_it_refuses_a_reviewer(client, alice, method):
    make_run("a", status="running")
    client.force_login(alice)
    response = getattr(client, method)(URL, {"do": "cancel:selected", "run": ["a"]})
    assert response.status_code == 403
    assert _status("a") == "running"


def test_it_redirects_anonymous_users_to_log_in(client):
    make_run("a", status="running")
    response = client.post(URL, {"do": "cancel:selected", "run": ["a"]})
    assert response.status_code == 302
    assert _status("a") == "running"


def test_it_lets_an_admin_cancel(client, carol):
    make_run("a", status="running")
    client.force_login(carol)
    client.post(URL, {"do": "cancel:selected", "run": ["a"], "reason": "admin says so"})
    assert _status("a") == "cancelled"


def test_it_rejects_an_unknown_action(client, bob):
    client.force_login(bob)
    response = client.get(URL, {"do": "delete:everything"}, follow=True)
    assert "Choose an action" in response.content.decode()


def test_it_says_when_there_is_no_filter_at_all(client, bob):
    make_run("a", status="running")
    client.force_login(bob)
    body = client.get(URL, {"do": "cancel:filtered"}).content.decode()
    assert '1 run matches <strong class="filter-words">no filter: every run</strong>' in body


def test_it_refuses_to_act_without_a_reason_and_changes_nothing(client, bob):
    make_run("a", status="running")
    client.force_login(bob)
    response = client.post(URL, {"do": "cancel:selected", "run": ["a"], "reason": "   "})
    assert response.status_code == 400
    assert "Give a reason" in response.content.decode()
    assert _status("a") == "running"


def test_it_refuses_an_empty_selection(client, bob):
    make_run("a", status="running")
    client.force_login(bob)
    response = client.get(URL, {"do": "cancel:selected"}, follow=True)
    assert "Nothing selected" in response.content.decode()


def test_it_audits_the_reason_on_every_run(client, bob):
    make_run("a", status="running")
    client.force_login(bob)
    client.post(URL, {"do": "cancel:filtered", "reason": "bad deploy 42"})
    event = AuditEvent.objects.get(action="run.cancel", target_id="a")
    assert event.after == {"status": "cancelled", "closed_approvals": [], "reason": "bad deploy 42"}


def test_it_goes_on_batch_by_batch_with_htmx_and_reports_progress(client, bob, monkeypatch):
    monkeypatch.setattr(actions, "BULK_LIMIT", 2)
    for index in range(5):
        make_run(f"r{index}", status="running")
    client.force_login(bob)
    form = {"do": "cancel:filtered", "status": "running", "reason": "drain"}
    first = client.post(URL, form, headers={"HX-Request": "true"}).content.decode()
    assert "Cancel: 2 runs changed; 3 to go" in first and 'hx-trigger="load"' in first
    second = client.post(
        URL, {**form, "done_so_far": "2"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert "Cancel: 4 runs changed; 1 to go" in second
    third = client.post(
        URL, {**form, "done_so_far": "4"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert "Cancel: 5 runs changed. Done." in third and 'hx-trigger="load"' not in third
    # The question and its live button are replaced once done, not left under "Done".
    assert '<div id="bulk-confirm" hx-swap-oob="true"></div>' in third
    assert '<h1 id="bulk-title" hx-swap-oob="true">Cancel: done</h1>' in third
    assert "bulk-confirm" not in first.replace('hx-include="#bulk-confirm"', "")
    assert Run.objects.filter(status="cancelled").count() == 5


def test_it_forks_failed_runs_from_their_failed_step_once(client, bob, rung, monkeypatch):
    monkeypatch.setattr(actions, "BULK_LIMIT", 1)
    for run_id in ("f1", "f2"):
        make_run(run_id, status="failed", agent="t-ledger")
        make_step(Run.objects.get(pk=run_id), 0, name="prepare")
        make_step(Run.objects.get(pk=run_id), 1, name="note", error={"message": "declined"})
    client.force_login(bob)
    form = {"do": "fork:filtered", "status": "failed", "reason": "retry after the fix"}
    client.post(URL, form, headers={"HX-Request": "true"})
    last = client.post(URL, form, headers={"HX-Request": "true"}).content.decode()
    assert "Done." in last
    forks = Run.objects.filter(parent__isnull=False)
    assert sorted(forks.values_list("parent_id", "fork_position")) == [("f1", 1), ("f2", 1)]


# --- An invalid filter never widens a bulk action (issue 22) ---------------------


def test_an_invalid_filter_keeps_the_typed_text_and_disables_bulk_actions(client, bob):
    make_run("a", status="running")
    client.force_login(bob)
    response = client.get(reverse("runs"), {"input": '{"order_id": "A-1001"', "agent": "x"})
    body = response.content.decode()
    assert response.status_code == 400
    assert 'name="input" value="{&quot;order_id&quot;: &quot;A-1001&quot;"' in body
    assert 'value="cancel:filtered" disabled' in body
    assert "Bulk actions are off until every filter is valid" in body


@pytest.mark.parametrize(
    "broken",
    [{"input": "{not json"}, {"since": "yesterday"}, {"until": "2026-13-45T99:99"}],
)
def test_a_bulk_action_under_an_invalid_filter_is_refused_and_changes_nothing(client, bob, broken):
    make_run("a", status="running")
    client.force_login(bob)
    confirm = client.get(URL, {"do": "cancel:filtered", **broken})
    assert confirm.status_code == 400
    assert "no filter: every run" not in confirm.content.decode()
    done = client.post(URL, {"do": "cancel:filtered", "reason": "tidy", **broken})
    assert done.status_code == 400
    assert "Not done" in done.content.decode()
    assert _status("a") == "running"
    assert not AuditEvent.objects.exists()
