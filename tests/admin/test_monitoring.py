"""/healthz checks the database and the broker; /metrics needs its token and reports
runs, approvals, escalations, executed vs replayed steps and step latency."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from durableruns import metrics
from durableruns.models import Approval, Effect, Run, Step, SweeperBeat
from durableruns.services import sweeper
from tests.admin.factories import make_run

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-tests"


@pytest.fixture
def swept():
    """A sweep recorded just now, as a worker's sweep leader does every interval."""
    sweeper.sweep(swept_by="test")


def test_healthz_reports_database_broker_and_sweeper(client, swept):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    body = response.json()
    assert body["last_sweep_age_seconds"] < 5
    assert {k: body[k] for k in ("database", "broker", "sweeper")} == {
        "database": "ok",
        "broker": "ok",
        "sweeper": "ok",
    }


def test_healthz_fails_when_no_sweep_ran_for_three_intervals(client, swept, settings):
    SweeperBeat.objects.update(swept_at=timezone.now() - timedelta(seconds=16))
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert response.json()["sweeper"] == "stale"


def test_healthz_fails_when_nothing_ever_swept(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert response.json()["sweeper"] == "never"


def test_healthz_fails_when_the_broker_is_down(client, swept):
    from durableruns.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    try:
        response = client.get(reverse("healthz"))
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["broker"] == "down"


def test_metrics_are_off_without_a_token(client, settings):
    settings.DURABLERUNS_METRICS_TOKEN = ""
    assert client.get(reverse("metrics")).status_code == 404


def test_metrics_refuse_a_wrong_token(client, settings, carol):
    settings.DURABLERUNS_METRICS_TOKEN = TOKEN
    client.force_login(carol)  # a session is not enough
    assert client.get(reverse("metrics")).status_code == 401
    response = client.get(reverse("metrics"), headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401


def test_metrics_report_runs_approvals_escalations_and_steps(client, settings):
    settings.DURABLERUNS_METRICS_TOKEN = TOKEN
    make_run("done", Run.Status.SUCCEEDED)
    make_run("esc", Run.Status.ESCALATED, effect_state=Effect.State.UNKNOWN)
    waiting = make_run("wait", Run.Status.AWAITING_APPROVAL)
    approval = Approval.objects.create(run=waiting, position=0, name="refund", payload={})
    Approval.objects.filter(pk=approval.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    now = timezone.now()
    Step.objects.create(
        run=waiting,
        position=1,
        step_id="1-x",
        kind="compute",
        name="x",
        started_at=now - timedelta(milliseconds=300),
        finished_at=now,
    )
    before = _scrape(client)
    metrics.count_step("tool", "executed")
    metrics.count_step("tool", "replayed")
    metrics.count_step("tool", "replayed")
    metrics.flush_step_counts()  # the executor does this at the end of every task
    text = _scrape(client)

    assert 'durableruns_runs{status="succeeded"} 1.0' in text
    assert 'durableruns_runs{status="awaiting_approval"} 1.0' in text
    assert 'durableruns_runs{status="running"} 0.0' in text
    assert "durableruns_pending_approvals 1.0" in text
    age = _value(text, "durableruns_oldest_pending_approval_age_seconds")
    assert 299 < age < 400
    assert "durableruns_open_escalations 1.0" in text
    replayed = 'durableruns_steps_total{kind="tool",outcome="replayed"}'
    assert _value(text, replayed) - _value(before, replayed) == 2
    assert 'durableruns_step_duration_seconds_bucket{le="0.25"} 0.0' in text
    assert 'durableruns_step_duration_seconds_bucket{le="0.5"} 1.0' in text


def _scrape(client) -> str:
    response = client.get(reverse("metrics"), headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_export_the_age_of_the_last_sweep(client, settings):
    settings.DURABLERUNS_METRICS_TOKEN = TOKEN
    assert _value(_scrape(client), "durableruns_last_sweep_age_seconds") == float("inf")
    sweeper.sweep(swept_by="test")
    SweeperBeat.objects.update(swept_at=timezone.now() - timedelta(seconds=42))
    assert 42 <= _value(_scrape(client), "durableruns_last_sweep_age_seconds") < 50
