"""Server-told back-off (issue 27): a live poll answered while the web process is busy
tells the page to wait (X-Poll-Interval), and one that says which version it shows is
shed (204 before any database work); a quiet process says nothing, and page loads and
POSTs are always served."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from durableruns.models import Run
from durableruns.web import backoff
from tests.web.dashboard import make_run, make_step

pytestmark = pytest.mark.django_db


@pytest.fixture
def watched(bob) -> tuple[Client, Run]:
    client = Client()
    client.force_login(bob)
    run = make_run("watched", status=Run.Status.RUNNING, started_at=timezone.now())
    make_step(run, 0)
    return client, run


def _poll(client: Client, run: Run):
    return client.get(reverse("run", args=[run.id]), headers={"HX-Request": "true"})


def _busy(stack: ExitStack, others: int) -> None:
    """`others` requests in flight in this process, as gunicorn's threads would be."""
    for _ in range(others):
        stack.enter_context(backoff.serving())


def test_a_quiet_process_does_not_slow_the_poll(watched):
    client, run = watched
    assert backoff.HEADER not in _poll(client, run)


def test_a_busy_process_tells_the_poll_to_wait(watched, settings):
    client, run = watched
    settings.DURABLERUNS_POLL_BUSY_AT, settings.DURABLERUNS_POLL_BACKOFF_SECONDS = 3, 7.5
    with ExitStack() as stack:
        _busy(stack, 2)
        assert backoff.HEADER not in _poll(client, run)
        _busy(stack, 1)
        assert _poll(client, run)[backoff.HEADER] == "7.5"
    assert backoff.HEADER not in _poll(client, run)  # the load went: full speed again


def test_an_unchanged_poll_carries_the_back_off_too(watched, settings):
    client, run = watched
    settings.DURABLERUNS_POLL_BUSY_AT = 0
    first = client.get(reverse("run", args=[run.id]))
    version = first.content.decode().split('"X-Live-Version": "', 1)[1].split('"', 1)[0]
    response = client.get(
        reverse("run", args=[run.id]), headers={"HX-Request": "true", "X-Live-Version": version}
    )
    assert response.status_code == 204 and response[backoff.HEADER] == "5.0"


def test_a_busy_process_sheds_a_versioned_poll_before_the_database(
    watched, settings, django_assert_num_queries
):
    client, run = watched
    settings.DURABLERUNS_POLL_BUSY_AT = 0
    headers = {"HX-Request": "true", "X-Live-Version": "an old version"}
    with django_assert_num_queries(0):
        response = client.get(reverse("run", args=[run.id]), headers=headers)
    assert response.status_code == 204 and response.content == b""
    assert response[backoff.HEADER] == "5.0"


def test_a_page_load_or_a_post_is_served_and_never_told_to_back_off(watched, settings):
    client, run = watched
    settings.DURABLERUNS_POLL_BUSY_AT = 0
    page = client.get(reverse("run", args=[run.id]))
    assert page.status_code == 200 and backoff.HEADER not in page
    cancelled = client.post(reverse("run-cancel", args=[run.id]), {"reason": "load test"})
    assert cancelled.status_code == 302 and backoff.HEADER not in cancelled
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED
