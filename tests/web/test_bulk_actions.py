"""Bulk cancel and resume from the runs list: a confirmation that says how many,
then a POST that changes exactly those runs, audited, and redirects."""

from __future__ import annotations

import pytest
from django.urls import reverse

from durableruns.models import AuditEvent, Run
from tests.web.dashboard import make_run, rung_fixture  # noqa: F401 - fixture

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
    response = client.post(URL, {"do": "cancel:selected", "run": ["a", "b"]}, follow=True)
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
    assert "2 runs match the filter" in confirm
    with django_capture_on_commit_callbacks(execute=True):
        client.post(URL, query)
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
    client.post(URL, {"do": "cancel:selected", "run": ["a"]})
    assert _status("a") == "cancelled"


def test_it_rejects_an_unknown_action(client, bob):
    client.force_login(bob)
    response = client.get(URL, {"do": "delete:everything"}, follow=True)
    assert "Choose an action" in response.content.decode()
