"""A live run page's poll costs nothing when nothing changed (issue 27): the page sends
the version it shows, and an unchanged poll is answered 204 with no body and no template
rendered; any change the page would show makes the next poll render again."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.test.utils import ContextList
from django.urls import reverse
from django.utils import timezone

from durableruns.models import Approval, AuditEvent, Run, Step
from durableruns.services import escalations
from tests.web.dashboard import make_effect, make_run, make_step

pytestmark = pytest.mark.django_db


def _version(body: str) -> str:
    return re.search(r'"X-Live-Version": "([0-9a-f]+)"', body).group(1)


def _poll(client, run: Run, version: str):
    return client.get(
        reverse("run", args=[run.id]), headers={"HX-Request": "true", "X-Live-Version": version}
    )


@pytest.fixture
def busy(alice, client) -> Run:
    client.force_login(alice)
    run = make_run("busy", status=Run.Status.RUNNING, started_at=timezone.now())
    make_step(run, 0)
    return run


def test_an_unchanged_poll_is_204_with_no_body_and_no_template(client, busy):
    version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
    response = _poll(client, busy, version)
    assert response.status_code == 204
    assert response.content == b""
    assert not response.templates and not isinstance(response.context, ContextList)


def test_the_clock_alone_does_not_change_the_version(client, busy):
    first = _version(client.get(reverse("run", args=[busy.id])).content.decode())
    time.sleep(1.1)  # what is under test is time passing: the old render's budget text moved
    assert _poll(client, busy, first).status_code == 204
    # The time budget counts in the browser instead, from the figure the render carried.
    body = client.get(reverse("run", args=[busy.id])).content.decode()
    assert re.search(r'id="time-budget" data-counted="[0-9.]+" data-of="30 min 0 s"', body)


@pytest.mark.parametrize(
    "change",
    [
        "a new step",
        "a step's effect finishing",
        "the status",
        "an audit event",
        "a lease pass",
        "one of two escalations resolved",
        "an approval decided",
        "an earlier branch of a fan-out committing after a later one",
        "an earlier branch's effect starting after a later branch committed",
    ],
)
def test_any_change_on_the_page_renders_again(client, busy, change, bob):
    version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
    if change == "a new step":
        make_step(busy, 1, name="refund")
    elif change == "a step's effect finishing":
        effect = make_effect(busy, 0, state="started")
        version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
        effect.state, effect.finished_at = "succeeded", timezone.now()
        effect.save()
    elif change.startswith("an earlier branch"):
        make_step(busy, 2, fan_out=1)  # branch 2 of the fan-out at #1 finished first
        make_effect(busy, 2, state="succeeded")
        version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
        if "effect" in change:
            make_effect(busy, 1, state="started")
        else:
            make_step(busy, 1, fan_out=1)
    elif change == "the status":
        Run.objects.filter(pk=busy.pk).update(status=Run.Status.SUCCEEDED)
    elif change == "an audit event":
        AuditEvent.objects.create(
            actor_name="bob", action="run.note", target_type="run", target_id=busy.id
        )
    elif change == "a lease pass":
        Run.objects.filter(pk=busy.pk).update(leases_taken=2)
    elif change == "an approval decided":
        approval = Approval.objects.create(run=busy, position=0, name="ok", allowed=["approve"])
        version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
        approval.state, approval.decided_at = Approval.State.APPROVED, timezone.now()
        approval.save()
    else:
        Run.objects.filter(pk=busy.pk).update(status=Run.Status.ESCALATED)
        first = make_effect(busy, 0, state="unknown")
        make_effect(busy, 1, state="unknown")
        make_step(busy, 1)
        version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
        escalations.resolve(first, "not_happened", user=bob, note="checked with the bank")
    response = _poll(client, busy, version)
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<section id="run-live"')
    if change != "the status":  # a terminal render stops polling: it carries no version
        assert _version(response.content.decode()) != version


def test_a_poll_with_a_stale_or_forged_version_renders(client, busy):
    for version in ("", "0" * 16, "\x00", "é" * 300):
        response = _poll(client, busy, version.encode("utf-8").decode("latin-1"))
        assert response.status_code == 200


def test_an_unchanged_poll_costs_the_login_and_one_query(
    client, busy, django_assert_max_num_queries
):
    version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
    Step.objects.filter(run=busy).update(finished_at=timezone.now() - timedelta(seconds=1))
    version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
    # session + user + the user's and the groups' permissions + the version: not the run
    with django_assert_max_num_queries(5):
        assert _poll(client, busy, version).status_code == 204


def test_a_poll_of_a_run_gone_since_is_a_404_not_a_204(client, busy):
    version = _version(client.get(reverse("run", args=[busy.id])).content.decode())
    Run.objects.filter(pk=busy.pk).delete()
    assert _poll(client, busy, version).status_code == 404


def _many_steps(run: Run, count: int) -> None:
    Step.objects.bulk_create(
        Step(
            run=run,
            position=p,
            step_id=f"{p}-s",
            kind="tool",
            name="lookup_order",
            started_at=run.started_at,
            finished_at=run.started_at,
        )
        for p in range(count)
    )


def test_a_long_run_shows_its_newest_hundred_steps_and_pages_back(client, busy):
    Step.objects.filter(run=busy).delete()
    _many_steps(busy, 250)
    Run.objects.filter(pk=busy.pk).update(steps_used=250)  # the engine counts as it records
    body = client.get(reverse("run", args=[busy.id])).content.decode()
    assert body.count('class="step step-') == 100
    assert 'id="step-249"' in body and 'id="step-149"' not in body
    assert "Showing steps #150 to #249 of 250" in body
    older = re.search(r'href="\?before=(\d+)" id="older-steps"', body).group(1)
    assert older == "150"
    page = client.get(reverse("run", args=[busy.id]), {"before": older}).content.decode()
    assert "Showing steps #50 to #149 of 250" in page and 'id="newest-steps"' in page
    # its live region keeps polling the same window
    assert f'hx-get="/runs/busy/?before={older}"' in page
    first = client.get(reverse("run", args=[busy.id]), {"before": "50"}).content.decode()
    assert "Showing steps #0 to #49" in first and 'id="older-steps"' not in first


@pytest.mark.parametrize("before", ["²", "-1", "9" * 40, "x", "1e3"])
def test_a_hostile_window_is_the_newest_one(client, busy, before):
    response = client.get(reverse("run", args=[busy.id]), {"before": before})
    assert response.status_code == 200
    assert 'id="step-0"' in response.content.decode()


def test_a_run_ending_while_its_page_renders_is_shown_by_the_next_poll(client, busy, monkeypatch):
    """The worker commits the run's end just after the page read the run's row. The page
    shows it running; its version must be the one before the end, or every later poll
    would be "unchanged" and the page would say Running for ever (seen after a fork)."""
    from durableruns.web import views

    real = views.get_object_or_404

    def read_then_end(*args, **kwargs):
        record = real(*args, **kwargs)
        Run.objects.filter(pk=busy.pk).update(
            status=Run.Status.SUCCEEDED, finished_at=timezone.now(), updated_at=timezone.now()
        )
        return record

    monkeypatch.setattr(views, "get_object_or_404", read_then_end)
    page = client.get(reverse("run", args=[busy.id])).content.decode()
    assert 'id="run-status">Running' in page
    monkeypatch.setattr(views, "get_object_or_404", real)

    response = _poll(client, busy, _version(page))
    assert response.status_code == 200
    assert 'id="run-status">Succeeded' in response.content.decode()
