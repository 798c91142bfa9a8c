"""A changed poll of a long run sends only what changed (issues 24 and 27): the step rows
and effects new since the page's render, the facts and the axis; the rows the page
already shows stay, since their bars are drawn in seconds and rescaled in the browser.
Anything else that changed (a lease pass, a branch filling a gap, a new status) renders
the whole live region again, as before."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test.utils import ContextList
from django.urls import reverse
from django.utils import timezone

from durableruns import roles
from durableruns.models import Run, Step
from tests.security.test_url_matrix import _client
from tests.web.dashboard import make_effect, make_run, step_row

pytestmark = pytest.mark.django_db


def _headers(body: str) -> dict[str, str]:
    """What the page sends with its next poll: its live region's headers, or those a
    changed poll left for it (#run-live-next, read by static/durableruns/live.js)."""
    found = re.search(r'id="run-live-next"[^>]*data-headers=\'([^\']*)\'', body)
    found = found or re.search(r'<section id="run-live"[^>]*hx-headers=\'([^\']*)\'', body)
    return {"HX-Request": "true", **json.loads(found.group(1))}


def _step(run: Run, position: int, **fields) -> Step:
    """A 5 ms lookup each second of the run, in its first lease."""
    return step_row(
        run, position, start_ms=position * 1000, duration_ms=5, lease_number=1, **fields
    )


def _add_step(run: Run, position: int, **fields) -> None:
    """The next step, committed as the engine does: the run row, the effect, the step."""
    Run.objects.filter(pk=run.pk).update(steps_used=position + 1, updated_at=timezone.now())
    make_effect(run, position, tool="lookup_order")
    _step(run, position, **fields).save()


@pytest.fixture
def long_run(alice, client) -> Run:
    """A running run of 200 steps, one effect every fifth step, its page open."""
    client.force_login(alice)
    run = make_run(
        "long",
        status=Run.Status.RUNNING,
        started_at=timezone.now() - timedelta(seconds=300),
        steps_used=200,
        max_steps=1_000,
    )
    Step.objects.bulk_create(_step(run, p) for p in range(200))
    for position in range(0, 200, 5):
        make_effect(run, position, tool="lookup_order")
    return run


def _page(client, run: Run) -> str:
    return client.get(reverse("run", args=[run.id])).content.decode()


def _poll(client, run: Run, headers: dict[str, str]):
    return client.get(reverse("run", args=[run.id]), headers=headers)


def test_a_changed_poll_sends_only_the_new_step_row(client, long_run):
    headers = _headers(_page(client, long_run))
    _add_step(long_run, 200)
    response = _poll(client, long_run, headers)
    body = response.content.decode()
    assert response.status_code == 200
    assert re.search(r'<li class="step step-tool" id="step-200">', body)
    assert 'id="step-150"' not in body and 'id="step-199"' not in body.replace(
        'afterend:#step-199"', ""
    )
    assert len(response.content) < 5_000, len(response.content)
    # The window stays the newest hundred: the oldest row shown leaves the page.
    assert re.search(r'<li id="step-100" hx-swap-oob="delete">', body)
    assert 'id="step-101"' not in body


def test_the_poll_after_a_changed_poll_is_204_with_no_body(client, long_run):
    headers = _headers(_page(client, long_run))
    _add_step(long_run, 200)
    headers = _headers(_poll(client, long_run, headers).content.decode())
    response = _poll(client, long_run, headers)
    assert response.status_code == 204 and response.content == b""
    assert not response.templates and not isinstance(response.context, ContextList)


def test_a_changed_poll_sends_the_grown_axis_and_the_new_effect(client, long_run):
    page = _page(client, long_run)
    axis = float(re.search(r'data-axis-seconds="([\d.]+)"', page).group(1))
    _add_step(long_run, 200)
    body = _poll(client, long_run, _headers(page)).content.decode()
    grown = float(re.search(r'data-axis-seconds="([\d.]+)"', body).group(1))
    assert grown > axis
    assert 'id="timeline-head"' in body
    assert "long:200-lookup_order:" in body  # the new step's effect, by its key
    # A new row's bar is in seconds from the run's start, whatever the axis.
    bar = re.search(r'id="step-200".*?<rect class="ran" x="([\d.]+)"', body, re.S)
    assert float(bar.group(1)) == pytest.approx(200, abs=0.01)


def test_a_page_without_the_newest_rows_headers_gets_the_whole_region(client, long_run):
    """An old page (or a script) that sends only the version gets what it always got."""
    version = _headers(_page(client, long_run))["X-Live-Version"]
    _add_step(long_run, 200)
    response = _poll(client, long_run, {"HX-Request": "true", "X-Live-Version": version})
    assert response.content.decode().lstrip().startswith('<section id="run-live"')
    assert response.content.decode().count('class="step step-') == 100


@pytest.mark.parametrize("change", ["a lease pass", "a branch filling a gap", "the status"])
def test_a_change_to_rows_already_shown_renders_the_whole_region(client, long_run, change):
    if change == "a branch filling a gap":
        Step.objects.filter(run=long_run, position=199).delete()
        Step.objects.filter(run=long_run, position=198).update(fan_out=198)
        _add_step(long_run, 200, fan_out=198)
    headers = _headers(_page(client, long_run))
    if change == "a lease pass":  # every row now says "replayed 1 time"
        Run.objects.filter(pk=long_run.pk).update(leases_taken=2, fence=2)
    elif change == "a branch filling a gap":
        _step(long_run, 199, fan_out=198).save()
    else:
        Run.objects.filter(pk=long_run.pk).update(status=Run.Status.WAITING)
    body = _poll(client, long_run, headers).content.decode()
    assert body.lstrip().startswith('<section id="run-live"')
    assert body.count('class="step step-') == 100


@pytest.mark.parametrize(
    "rows",
    [
        "9" * 100_000,  # huge
        "100-199-100-\x00" + "a" * 15,  # NUL
        "199-100-0-" + "0" * 16,  # last before first
        "0-999999999-999999999-" + "f" * 16,  # a window the run never had
        "100-199-100-" + "g" * 16,  # not a frame
        "-1-199-100-" + "0" * 16,
    ],
)
def test_a_hostile_rows_header_gets_the_whole_region(client, long_run, rows):
    """The header is the browser's word about what it shows, so a forged or broken one
    may only cost a full render: never a 500, never rows the page lacks."""
    headers = _headers(_page(client, long_run))
    _add_step(long_run, 200)
    response = _poll(client, long_run, {**headers, "X-Live-Rows": rows})
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<section id="run-live"')


def test_the_next_viewers_of_a_change_get_its_answer_without_a_render(
    client, long_run, django_user_model, django_assert_max_num_queries
):
    """Ten people watching one run asked for the same answer ten times after each step."""
    other = _client(roles.REVIEWER, django_user_model)
    headers = _headers(_page(client, long_run))
    assert _headers(_page(other, long_run)) == headers  # the same rows, at the same version
    _add_step(long_run, 200)
    first = _poll(client, long_run, headers)
    assert first.status_code == 200 and first.templates
    for _ in range(2):
        # The login's queries and the version's; no run row, no steps, no template.
        with django_assert_max_num_queries(4):
            again = _poll(other, long_run, headers)
        assert again.status_code == 200 and not again.templates
        assert again.content == first.content and again["HX-Reswap"] == "none"
    # A further change is a new version: rendered again, with the new row.
    _add_step(long_run, 201)
    later = _poll(other, long_run, _headers(first.content.decode()))
    assert later.templates and 'id="step-201"' in later.content.decode()


def test_a_person_who_may_operate_never_gets_a_viewers_shared_answer(
    client, long_run, django_user_model
):
    """An operator's page frame holds what they may do (cancel, resume): even with a
    reviewer's headers they get an answer rendered for them, and the other way round."""
    operator = _client(roles.OPERATOR, django_user_model)
    headers = _headers(_page(client, long_run))
    assert _headers(_page(operator, long_run))["X-Live-Rows"] != headers["X-Live-Rows"]
    _add_step(long_run, 200)
    assert _poll(client, long_run, headers).templates
    assert _poll(operator, long_run, headers).templates  # the reviewer's headers


def test_an_answer_that_used_its_viewers_csrf_token_is_never_shared(
    client, long_run, django_user_model, monkeypatch
):
    """No out-of-band part holds a form today; one that did would carry its first
    viewer's CSRF token, which must never reach another person."""
    from django.middleware.csrf import get_token

    from durableruns.web import views

    def with_a_form(request, record, version):
        get_token(request)  # what a {% csrf_token %} in the answer does
        return run_context(request, record, version)

    run_context = views.run_context
    monkeypatch.setattr(views, "run_context", with_a_form)
    other = _client(roles.REVIEWER, django_user_model)
    headers = _headers(_page(client, long_run))
    _add_step(long_run, 200)
    assert _poll(client, long_run, headers).templates
    assert _poll(other, long_run, headers).templates  # rendered for them, not shared
