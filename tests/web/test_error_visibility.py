"""Recorded tracebacks (server paths, code) are for operators and admins; reviewers
see the error's type and message, on the pages and in the API."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from durableruns.models import Run, Step

pytestmark = pytest.mark.django_db

ERROR = {
    "type": "ValueError",
    "message": "the order total is negative",
    "traceback": 'Traceback (most recent call last):\n  File "/srv/app/agents/refund.py", line 9',
}


@pytest.fixture
def failed(db):
    Run.objects.create(
        id="failed-1",
        agent="refund-bot",
        agent_version="1",
        input={},
        status=Run.Status.FAILED,
        error=ERROR,
        max_steps=5,
        max_duration_seconds=60,
    )
    now = timezone.now()
    Step.objects.create(
        run_id="failed-1",
        position=0,
        step_id="0-x",
        kind="compute",
        name="x",
        error=ERROR,
        started_at=now,
        finished_at=now,
    )


def _seen(client, user) -> list[str]:
    client.force_login(user)
    page = client.get(reverse("run-step", args=["failed-1", 0])).content.decode()
    run = client.get(reverse("api-run", args=["failed-1"])).content.decode()
    steps = client.get(reverse("api-run-steps", args=["failed-1"])).content.decode()
    return [page, run, steps]


def test_a_reviewer_sees_the_error_type_and_message_but_no_traceback(client, alice, failed):
    for body in _seen(client, alice):
        assert "ValueError" in body and "the order total is negative" in body
        assert "/srv/app/agents" not in body and "Traceback" not in body


@pytest.mark.parametrize("who", ["bob", "carol"])
def test_operators_and_admins_see_the_traceback(client, who, request, failed):
    for body in _seen(client, request.getfixturevalue(who)):
        assert "/srv/app/agents/refund.py" in body
