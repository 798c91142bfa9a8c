"""A run retention redacted cannot be resumed: its input and steps are gone ("[REDACTED by
retention]"), so agent code would fail on them (issue 22). Refused by the web and the
API with the reason, and the run page does not offer it; dry replay and fork refuse too."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from durableruns.models import AuditEvent, RetentionPolicy, Run
from durableruns.services import retention
from tests.web.dashboard import make_run, rung_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def redacted(db) -> Run:
    """refund-bot that failed 40 days ago, then redacted by a retention policy."""
    run = make_run(
        "old-failure",
        status=Run.Status.FAILED,
        created_at=timezone.now() - timedelta(days=40),
        error={"type": "PermanentError", "message": "provider down"},
    )
    Run.objects.filter(pk=run.pk).update(input={"order_id": "A-1002"})
    policy = RetentionPolicy.objects.create(
        name="redact-old", agent="refund-bot", statuses=["failed"], age_days=30, action="redact"
    )
    retention.apply(policy)
    run.refresh_from_db()
    assert run.redacted_at is not None and run.input == retention.REDACTED_PAYLOAD
    return run


def test_the_api_refuses_to_resume_a_redacted_run(client, bob, redacted):
    client.force_login(bob)
    response = client.post(f"/api/runs/{redacted.id}/resume/")
    assert response.status_code == 409
    assert "retention redacted" in response.json()["detail"]
    assert Run.objects.get(pk=redacted.id).status == Run.Status.FAILED
    assert not AuditEvent.objects.filter(action="run.resume").exists()


def test_the_web_refuses_to_resume_a_redacted_run_and_says_why(client, bob, redacted):
    client.force_login(bob)
    response = client.post(reverse("run-resume", args=[redacted.id]), follow=True)
    assert "retention redacted" in response.content.decode()
    assert Run.objects.get(pk=redacted.id).status == Run.Status.FAILED
    assert not AuditEvent.objects.filter(action="run.resume").exists()


def test_the_run_page_does_not_offer_resume_on_a_redacted_run(client, bob, redacted):
    client.force_login(bob)
    page = client.get(reverse("run", args=[redacted.id])).content.decode()
    assert 'id="resume-run"' not in page
    make_run("fresh-failure", status=Run.Status.FAILED)
    assert 'id="resume-run"' in client.get(reverse("run", args=["fresh-failure"])).content.decode()


def test_bulk_resume_leaves_redacted_runs_out(client, bob, redacted):
    client.force_login(bob)
    response = client.post(
        reverse("runs-bulk"), {"do": "resume:filtered", "reason": "retry all"}, follow=True
    )
    assert "Resume: 0 runs changed." in response.content.decode()
    assert Run.objects.get(pk=redacted.id).status == Run.Status.FAILED
