"""The run page: facts, budgets, a live timeline that stops polling when the run is
terminal, executed vs replayed, the timeline, the input, pending work, effects, audit
trail, actions by role."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from durableruns.engine import executor
from durableruns.engine.runs import start_run
from durableruns.models import Approval, AuditEvent, Run, Step
from durableruns.templatetags.dashboard import seconds
from durableruns.web import step_window
from durableruns.web.timeline import duration_text
from tests.conftest import wait_for
from tests.web.dashboard import (  # noqa: F401 - fixture
    T0,
    make_effect,
    make_run,
    make_step,
    rung_fixture,
    step_row,
)

pytestmark = pytest.mark.django_db


def _url(run: Run) -> str:
    return reverse("run", args=[run.id])


def _live_region(body: str) -> str:
    return re.search(r'<section id="run-live"[^>]*>', body).group(0)


@pytest.fixture
def finished(bob) -> Run:
    run = make_run(
        "finished",
        status=Run.Status.SUCCEEDED,
        created_by=bob,
        steps_used=3,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=90),
        max_duration_seconds=600,
        leases_taken=3,
    )
    make_step(
        run,
        0,
        kind="llm",
        name="plan",
        duration_ms=400,
        lease_number=1,
        executed_by="host:1:aaaa",
        input={"messages": []},
        result={"content": "ok"},
    )
    make_step(
        run,
        1,
        name="lookup_order",
        start_ms=400,
        duration_ms=50,
        lease_number=1,
        result={"id": "A-1001"},
    )
    make_step(
        run,
        2,
        name="refund",
        start_ms=450,
        duration_ms=100,
        lease_number=3,
        executed_by="host:2:bbbb",
        error={"type": "PermanentError", "message": "declined"},
    )
    make_effect(run, 2, tool="refund", state="failed")
    return run


def test_it_redirects_anonymous_users_to_log_in(client, finished):
    assert client.get(_url(finished)).status_code == 302


def test_it_refuses_a_user_without_a_role(client, dave, finished):
    client.force_login(dave)
    assert client.get(_url(finished)).status_code == 403


def test_it_shows_status_agent_and_who_started_it(client, alice, finished):
    client.force_login(alice)
    body = client.get(_url(finished)).content.decode()
    assert 'id="run-status">Succeeded<' in body
    assert "refund-bot@1" in body
    assert "<dt>Started by</dt><dd>bob</dd>" in body


def test_it_shows_budgets_as_progress(client, alice, finished):
    client.force_login(alice)
    body = client.get(_url(finished)).content.decode()
    assert '<progress value="3" max="20" aria-label="Steps used">15%</progress>' in body
    assert '<progress value="90" max="600" aria-label="Time used">15%</progress>' in body
    assert "1 min 30 s of 10 min 0 s" in body


def test_it_shows_each_step_with_kind_attempts_duration_and_origin(client, alice, finished):
    client.force_login(alice)
    body = client.get(_url(finished)).content.decode()
    assert re.search(
        r"#0 <span class=\"kind\">llm</span> <strong>plan</strong> · 1 attempt · "
        r"400 ms ·\s+<span class=\"origin\">executed, replayed 2 times</span>",
        body,
    )
    assert re.search(
        r"<strong>refund</strong>.*?<span class=\"origin\">executed</span>", body, re.S
    )
    assert 'class="step step-tool step-error" id="step-2"' in body


def _step(client, run: Run, position: int, *, htmx: bool = False) -> str:
    url = reverse("run-step", args=[run.id, position])
    return client.get(url, headers={"HX-Request": "true"} if htmx else {}).content.decode()


def test_a_step_opens_to_its_provenance_input_and_output(client, alice, finished):
    client.force_login(alice)
    page = client.get(_url(finished)).content.decode()
    step_url = reverse("run-step", args=[finished.id, 0])
    # Loaded when opened (htmx), with a plain link for browsers without JavaScript.
    assert f'<details hx-get="{step_url}" hx-trigger="toggle once"' in page
    assert f'<a href="{step_url}">' in page
    body = _step(client, finished, 0, htmx=True)
    assert not body.lstrip().startswith("<!doctype")
    assert "by <code>host:1:aaaa</code> (executor pass 1)" in body
    assert "replayed from its checkpoint by 2 later passes" in body
    assert "&quot;content&quot;: &quot;ok&quot;" in body


def test_a_failed_step_opens_to_its_error(client, alice, finished):
    client.force_login(alice)
    body = _step(client, finished, 2)
    assert body.lstrip().startswith("<!doctype")  # the page without JavaScript
    assert "&quot;message&quot;: &quot;declined&quot;" in body
    assert "not replayed since." in body


def test_it_escapes_step_payloads(client, alice):
    run = make_run("xss")
    make_step(run, 0, result={"html": "<img src=x onerror=alert(1)>"})
    client.force_login(alice)
    body = _step(client, run, 0)
    assert "<img src=x" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body


def test_a_step_page_needs_a_role(client, dave, finished):
    client.force_login(dave)
    assert client.get(reverse("run-step", args=[finished.id, 0])).status_code == 403


def test_a_step_page_of_a_missing_step_is_not_found(client, alice, finished):
    client.force_login(alice)
    assert client.get(reverse("run-step", args=[finished.id, 99])).status_code == 404


def test_it_morphs_the_live_region_while_active_and_stops_when_terminal(client, alice):
    run = make_run("busy", status=Run.Status.RUNNING)
    make_step(run, 0)
    client.force_login(alice)
    live = _live_region(client.get(_url(run)).content.decode())
    assert 'hx-swap="morph"' in live and 'hx-trigger="every 1s"' in live
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    live = _live_region(client.get(_url(run)).content.decode())
    assert "hx-trigger" not in live and "hx-get" not in live


def _bars(body: str, rect: str = "ran") -> list[tuple[float, float]]:
    """(x, width) of each bar's `rect`, in percent of the axis: a bar is drawn in seconds
    in a viewBox as long as the axis, stretched to the plot's width."""
    bars = re.findall(r'<svg class="bar"[^>]*viewBox="0 0 ([\d.]+) 12"(.*?)</svg>', body, re.S)
    return [
        (100 * float(x) / float(axis), 100 * float(w) / float(axis))
        for axis, svg in bars
        for x, w in re.findall(rf'<rect class="{rect}" x="([\d.]+)" width="([\d.]+)"', svg)
    ]


def test_it_draws_one_bar_per_step_on_a_shared_axis(client, alice, finished):
    client.force_login(alice)
    body = client.get(_url(finished)).content.decode()
    bars = _bars(body)
    assert len(bars) == 3
    (x0, w0), (x1, _), (x2, w2) = bars
    assert x0 < x1 < x2  # later steps start further right
    assert w0 == pytest.approx(4 * w2, rel=0.05)  # 400 ms is four times 100 ms
    axis = re.search(r'<svg class="axis".*?</svg>', body, re.S).group(0)
    # The run lasted 90 s: the axis reads in seconds, not "90000 ms".
    assert ">30 s<" in axis and "ms" not in axis


def test_it_draws_a_fan_outs_branches_as_overlapping_bars(client, alice):
    run = make_run("fanned", started_at=T0, finished_at=T0 + timedelta(seconds=4))
    make_step(run, 0, duration_ms=1000)
    # Three branches from 1 s: the last submitted finished first.
    for position, ms in ((1, 2500), (2, 1500), (3, 500)):
        make_step(run, position, start_ms=1000 + position, duration_ms=ms, fan_out=1)
    make_step(run, 4, start_ms=3600, duration_ms=100)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    (_, _), *branches, (x4, _) = _bars(body)
    # Each branch starts before the others end: the bars overlap on the axis.
    assert max(x for x, _ in branches) < min(x + w for x, w in branches)
    assert all(x + w <= x4 for x, w in branches)
    for position in (1, 2, 3):
        row = re.search(rf'<li class="step[^"]*" id="step-{position}">.*?</li>', body, re.S)
        assert "step-branch" in row.group(0)
        assert f"∥ branch {position} of the fan-out at #1" in row.group(0)
    row = re.search(r'<li class="step[^"]*" id="step-4">.*?</li>', body, re.S).group(0)
    assert "step-branch" not in row and "∥" not in row


def _at(ms: float) -> str:
    return (T0 + timedelta(milliseconds=ms)).isoformat()


def test_a_retried_steps_bar_shows_each_attempt_as_a_segment(client, alice):
    run = make_run("retried", started_at=T0, finished_at=T0 + timedelta(seconds=10))
    make_step(run, 0, duration_ms=1000)
    # Attempt 1 ran 1-2 s and failed, attempt 2 ran 4-6 s and failed, attempt 3 ran 8-9 s.
    times = [[_at(1000), _at(2000)], [_at(4000), _at(6000)]]
    make_step(run, 1, start_ms=8000, duration_ms=1000, attempts=3, attempt_times=times)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    row = re.search(r'<li class="step[^"]*" id="step-1">.*?</li>', body, re.S).group(0)
    failed = _bars(row, "attempt-failed")
    assert failed == [pytest.approx((10.0, 10.0)), pytest.approx((40.0, 20.0))]
    assert _bars(row) == [pytest.approx((80.0, 10.0))]  # the last attempt, after the failed
    assert "attempt 1 failed after 1.0 s at +1.0 s" in row
    assert "attempt 2 failed after 2.0 s at +4.0 s" in row
    first = re.search(r'<li class="step[^"]*" id="step-0">.*?</li>', body, re.S).group(0)
    assert "attempt-failed" not in first


def test_each_failed_attempts_error_is_in_its_bar_and_on_the_step_page(client, alice):
    run = make_run("why", started_at=T0, finished_at=T0 + timedelta(seconds=10))
    times = [
        [_at(1000), _at(2000), "TransientError: provider busy (1)"],
        [_at(4000), _at(6000), "TransientError: <b>provider</b> busy (2)"],
    ]
    make_step(run, 0, start_ms=8000, duration_ms=1000, attempts=3, attempt_times=times)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert "attempt 1 failed after 1.0 s at +1.0 s (TransientError: provider busy (1))" in body
    assert "&lt;b&gt;provider&lt;/b&gt;" in body and "<b>provider</b>" not in body
    step = client.get(reverse("run-step", args=[run.id, 0])).content.decode()
    assert "Attempt 1 failed after 1.0 s: TransientError: provider busy (1)" in step
    assert "Attempt 2 failed after 2.0 s: TransientError: &lt;b&gt;provider" in step


def test_attempts_are_numbered_back_from_the_recorded_one(client, alice):
    """A retry under way when attempt times came in has times for its later attempts only."""
    run = make_run("upgraded", started_at=T0, finished_at=T0 + timedelta(seconds=10))
    times = [[_at(4000), _at(6000)]]  # attempt 3 of 4; attempts 1 and 2 were not timed
    make_step(run, 0, start_ms=8000, duration_ms=1000, attempts=4, attempt_times=times)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert "attempt 3 failed after 2.0 s at +4.0 s; attempt 4 ran" in body


def test_unreadable_attempt_times_draw_no_segments_and_no_error(client, alice):
    run = make_run("odd-times", started_at=T0, finished_at=T0 + timedelta(seconds=10))
    odd = [["not a time", _at(1)], "x", [_at(1)], None]
    make_step(run, 0, start_ms=5000, duration_ms=1000, attempts=5, attempt_times=odd)
    client.force_login(alice)
    response = client.get(_url(run))
    assert response.status_code == 200
    assert "attempt-failed" not in response.content.decode()


def test_a_pending_retry_shows_its_failed_attempts_as_segments(client, alice):
    started = timezone.now() - timedelta(seconds=10)
    run = make_run(
        "pending-retry",
        status=Run.Status.WAITING,
        started_at=started,
        retry_position=1,
        retry_attempts=2,
        retry_attempt_times=[
            [(started + timedelta(seconds=s)).isoformat() for s in pair]
            for pair in ((2, 3), (5, 7))
        ],
        last_error={"message": "provider timed out"},
        wake_at=timezone.now() + timedelta(seconds=10),
    )
    make_step(run, 0, start_ms=0, duration_ms=1000)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    pending = re.search(r'id="step-pending".*?</li>', body, re.S).group(0)
    assert len(re.findall(r'<rect class="attempt-failed"', pending)) == 2


def test_a_forks_axis_spans_the_fork_only(client, alice):
    parent = make_run("old-parent", started_at=T0, finished_at=T0 + timedelta(days=3))
    make_step(parent, 0, duration_ms=1000)
    make_step(parent, 1, start_ms=3 * 86_400_000, duration_ms=1000)
    forked_at = T0 + timedelta(days=5)
    child = make_run(
        "young-fork",
        parent=parent,
        fork_position=1,
        started_at=forked_at,
        finished_at=forked_at + timedelta(seconds=60),
    )
    make_step(child, 0, duration_ms=1000)  # copied: the parent's time
    make_step(child, 1, start_ms=5 * 86_400_000 + 2000, duration_ms=3000, lease_number=1)
    client.force_login(alice)
    body = client.get(_url(child)).content.decode()
    assert len(_bars(body)) == 1  # the reused step has no bar on the fork's axis
    assert "1 min 0 s" in body and " h " not in re.search(
        r'<svg class="axis".*?</svg>', body, re.S
    ).group(0)


def test_the_time_budget_leaves_out_approval_waits(client, alice):
    run = make_run(
        "waited",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=56.2),
        max_duration_seconds=60,
    )
    make_step(run, 0, kind="approval", name="ok", duration_ms=55_000)
    make_step(run, 1, start_ms=55_000, duration_ms=1000)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert re.search(r'id="time-budget">1.2 s of 1 min 0 s<', body), body
    assert "not counting 55.0 s waiting for approval" in body


@pytest.mark.parametrize(
    ("duration_ms", "reads"),
    [(104_547.9, "1 min 44 s"), (850.4, "850 ms"), (3 * 3_600_000 + 1_260_000, "3 h 21 min")],
    ids=["approval-wait", "sub-second", "hours"],
)
def test_step_durations_read_in_human_units(client, alice, duration_ms, reads):
    run = make_run("timed", started_at=T0, finished_at=T0 + timedelta(hours=4))
    make_step(run, 0, kind="approval", name="ok", duration_ms=duration_ms)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    step_page = client.get(reverse("run-step", args=[run.id, 0])).content.decode()
    assert f"<strong>ok</strong> · 1 attempt · {reads} ·" in body
    assert f"1 attempt, {reads}." in step_page
    assert f"{duration_ms:.1f} ms" not in body + step_page


def test_a_duration_is_never_shown_negative():
    # The database's clock and a worker's may disagree by a little.
    assert duration_text(-0.005) == "0 ms"
    assert seconds(-3) == "0 ms"


@pytest.mark.parametrize("window", [10_000, 1], ids=["all-steps", "windowed"])
def test_the_time_budget_leaves_out_durable_sleeps_as_the_engine_does(
    client, alice, monkeypatch, window
):
    """The engine leaves a `run.sleep` out of max_duration (issue 26); the page showed
    it as time used: 41.2 s of 30 s for a run the engine let finish."""
    monkeypatch.setattr(step_window, "WINDOW", window)
    run = make_run(
        "slept", started_at=T0, finished_at=T0 + timedelta(seconds=41.2), max_duration_seconds=30
    )
    make_step(run, 0, kind="sleep", name="cool-off", duration_ms=1)
    Step.objects.filter(run=run, position=0).update(
        result={"until": (T0 + timedelta(seconds=40)).isoformat()}
    )
    make_step(run, 1, start_ms=40_000, duration_ms=1000)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert re.search(r'id="time-budget">1.2 s of 30.0 s<', body), body
    assert "not counting 40.0 s waiting for approval, child runs or a durable sleep" in body


def test_it_shows_the_runs_input_as_stored(client, alice):
    run = make_run("asked", status=Run.Status.FAILED, error={"message": "declined"})
    Run.objects.filter(pk=run.pk).update(input={"order_id": "A-<b>1001</b>"})
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert "A-&lt;b&gt;1001&lt;/b&gt;" in re.search(
        r'<pre id="run-input">.*?</pre>', body, re.S
    ).group(0)


def test_it_shows_a_retrying_step_with_its_attempt_and_next_retry(client, alice):
    due = timezone.now() + timedelta(seconds=30)
    run = make_run(
        "retrying",
        status=Run.Status.WAITING,
        started_at=timezone.now(),
        retry_position=1,
        retry_attempts=2,
        last_error={"message": "provider timed out"},
        wake_at=due,
    )
    make_step(run, 0, start_ms=0)
    make_effect(run, 1, tool="charge", state="failed")
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    retry = re.search(r'<p class="retrying".*?</p>', body, re.S).group(0)
    assert "attempt 2 failed; attempt 3 at" in retry and "<code>charge</code>" in retry
    assert f'datetime="{due.isoformat()[:19]}' in retry
    assert "Last error: provider timed out" in body
    assert "Failed, retrying" in body  # not a bare red "Failed"
    assert 'id="step-pending"' in body


def test_an_escalated_run_links_to_its_resolution_and_no_dead_anchor(client, alice):
    run = make_run("stuck", status=Run.Status.ESCALATED)
    make_step(run, 0)
    effect = make_effect(run, 1, tool="refund_unsafe", state="unknown")
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert f'href="/escalations/#escalation-{effect.pk}"' in body
    anchors = set(re.findall(r'href="#([^"]+)"', body))
    ids = set(re.findall(r' id="([^"]+)"', body))
    assert anchors and anchors <= ids, anchors - ids


def test_it_lists_effects_and_the_audit_trail(client, alice, finished, bob):
    effect = finished.effects.get()
    AuditEvent.objects.create(
        actor_id=bob.pk,
        actor_name="bob",
        action="effect.resolve",
        target_type="effect",
        target_id=str(effect.pk),
    )
    AuditEvent.objects.create(
        actor_id=bob.pk,
        actor_name="bob",
        action="run.resume",
        target_type="run",
        target_id=finished.id,
    )
    AuditEvent.objects.create(
        actor_id=bob.pk,
        actor_name="bob",
        action="run.cancel",
        target_type="run",
        target_id="another-run",
    )
    approval = Approval.objects.create(run=finished, position=1, name="approve-refund")
    AuditEvent.objects.create(
        actor_id=alice.pk,
        actor_name="alice",
        action="approval.approve",
        target_type="approval",
        target_id=str(approval.pk),
    )
    client.force_login(alice)
    body = client.get(_url(finished)).content.decode()
    assert effect.idempotency_key in body
    assert body.count("<h2>Audit trail</h2>") == 1
    audit = re.search(r'<ol class="audit">.*?</ol>', body, re.S).group(0)
    assert "effect.resolve" in audit and "run.resume" in audit and "approval.approve" in audit
    assert "run.cancel" not in audit


def test_it_polls_while_the_run_is_not_terminal(client, alice):
    run = make_run("busy", status=Run.Status.RUNNING, started_at=timezone.now())
    client.force_login(alice)
    region = _live_region(client.get(_url(run)).content.decode())
    assert 'hx-trigger="every 1s"' in region


def test_its_terminal_render_stops_polling(client, alice, finished):
    client.force_login(alice)
    partial = client.get(_url(finished), headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<section id="run-live"')
    assert "hx-trigger" not in _live_region(partial)


def test_it_hides_actions_from_a_reviewer(client, alice, finished):
    client.force_login(alice)
    body = client.get(_url(finished)).content.decode()
    assert "Dry replay" not in body and "Fork" not in body and "Resume run" not in body


@pytest.mark.parametrize("actor", ["bob", "carol"])
def test_it_shows_actions_that_fit_the_status_to_operators(client, request, actor):
    running = make_run("running", status=Run.Status.RUNNING)
    failed = make_run("failed", status=Run.Status.FAILED)
    make_step(failed, 0)
    client.force_login(request.getfixturevalue(actor))
    body = client.get(_url(running)).content.decode()
    assert "Cancel run" in body and "Resume run" not in body and "Dry replay" in body
    body = client.get(_url(failed)).content.decode()
    assert "Resume run" in body and "Cancel run" not in body and "Fork from step" in body


def test_an_operator_cancels_a_run_with_a_reason_and_is_redirected_back(client, bob):
    run = make_run("busy", status=Run.Status.RUNNING)
    client.force_login(bob)
    page = client.get(reverse("run-cancel", args=[run.id])).content.decode()
    assert "Cancel run <code>busy</code>?" in page and 'name="reason"' in page
    response = client.post(
        reverse("run-cancel", args=[run.id]), {"reason": "wrong customer"}, follow=True
    )
    assert response.redirect_chain == [(_url(run), 302)]
    assert "Cancelled run busy." in response.content.decode()
    assert Run.objects.get(pk=run.id).status == Run.Status.CANCELLED
    event = AuditEvent.objects.get(action="run.cancel", actor_name="bob")
    assert event.after["reason"] == "wrong customer"


@pytest.mark.parametrize("reason", ["", "   ", "x" * 501])
def test_a_cancel_without_a_reason_is_refused_and_changes_nothing(client, bob, reason):
    # One rule on the run page, in bulk and in the API (tests/api/test_api_runs.py).
    run = make_run("busy", status=Run.Status.RUNNING)
    client.force_login(bob)
    response = client.post(reverse("run-cancel", args=[run.id]), {"reason": reason})
    assert response.status_code == 400
    assert "Not cancelled: give a reason (1 to 500 characters)" in response.content.decode()
    assert Run.objects.get(pk=run.id).status == Run.Status.RUNNING
    assert not AuditEvent.objects.exists()


def test_an_operator_resumes_a_failed_run(client, bob, rung, django_capture_on_commit_callbacks):
    run = make_run("broken", status=Run.Status.FAILED)
    client.force_login(bob)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("run-resume", args=[run.id]))
    assert Run.objects.get(pk=run.id).status == Run.Status.QUEUED
    assert rung == ["broken"]


def test_resuming_a_finished_run_changes_nothing(client, bob):
    run = make_run("done", status=Run.Status.SUCCEEDED)
    client.force_login(bob)
    response = client.post(reverse("run-resume", args=[run.id]), follow=True)
    assert "only failed, cancelled or waiting runs can be resumed" in response.content.decode()
    assert Run.objects.get(pk=run.id).status == Run.Status.SUCCEEDED


@pytest.mark.parametrize("action", ["run-cancel", "run-resume"])
def test_a_reviewer_cannot_cancel_or_resume(client, alice, action):
    run = make_run("busy", status=Run.Status.RUNNING)
    client.force_login(alice)
    assert client.post(reverse(action, args=[run.id])).status_code == 403
    assert Run.objects.get(pk=run.id).status == Run.Status.RUNNING


def test_resume_refuses_get_and_cancel_answers_it_with_the_confirmation(client, bob):
    run = make_run("busy", status=Run.Status.RUNNING)
    client.force_login(bob)
    assert client.get(reverse("run-resume", args=[run.id])).status_code == 405
    assert client.get(reverse("run-cancel", args=[run.id])).status_code == 200
    assert Run.objects.get(pk=run.id).status == Run.Status.RUNNING


def test_it_counts_replays_of_steps_executed_by_the_real_engine(client, alice, rung):
    """Two executor passes: the first executes step 0 and sleeps; the second replays
    step 0 and executes step 2. The page tells them apart."""
    from tests.engine import agents  # noqa: F401 - registers t-sleepy

    run, _ = start_run("t-sleepy", {"seconds": 0.05}, run_id="sleepy")
    executor.advance(run.id)
    wake_at = Run.objects.get(pk=run.id).wake_at
    wait_for(lambda: timezone.now() > wake_at, message="the nap to end")
    executor.advance(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    origins = re.findall(r'<span class="origin">([^<]+)</span>', body)
    assert origins == ["executed, replayed 1 time", "executed, replayed 1 time", "executed"]
    assert "<dt>Executor passes</dt><dd>2 " in body


@pytest.mark.parametrize("steps", [5, 50])
def test_it_uses_a_constant_number_of_queries(client, bob, django_assert_num_queries, steps):
    run = make_run(
        "big",
        status=Run.Status.SUCCEEDED,
        created_by=bob,
        steps_used=steps,
        max_steps=100,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=5),
    )
    for position in range(steps):
        make_step(run, position, start_ms=position * 10)
        make_effect(run, position)
    client.force_login(bob)
    # session, user, permissions (own and the roles', one query), the live version (read
    # before the run, views.run), run, steps, effects, approvals, audit trail, child runs,
    # waiting steps (the time budget)
    with django_assert_num_queries(11):
        response = client.get(_url(run))
    assert response.content.decode().count('class="step step-') == steps


def test_the_timeline_escapes_step_names_and_kinds(client, alice):
    run = make_run("hostile")
    make_step(run, 0, name='"><svg onload=alert(1)>', kind="tool")
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert "<svg onload" not in body
    assert "&quot;&gt;&lt;svg onload=alert(1)&gt;" in body


def test_the_time_budget_leaves_out_waits_for_a_worker_that_has_the_agent(client, alice):
    run = make_run(
        "handed",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=32),
        max_duration_seconds=60,
    )
    Run.objects.filter(pk=run.pk).update(handed_back_seconds=30.0)
    make_step(run, 0, start_ms=30_000, duration_ms=2000)
    client.force_login(alice)
    body = client.get(_url(run)).content.decode()
    assert re.search(r'id="time-budget">2.0 s of 1 min 0 s<', body), body
    assert "not counting 30.0 s waiting for a worker that has the agent" in body


def test_an_axis_of_months_has_a_few_ticks_in_days():
    """A live poll sends the axis again whenever it grows: one tick a day was 35 KB."""
    from durableruns.web.timeline import _ticks

    labels = [tick.label for tick in _ticks(340 * 86_400)]
    assert len(labels) <= 7 and labels[1].endswith(" d")


def _step_rows_read(sql: str) -> int:
    """Rows of durableruns_step that Postgres visited executing `sql` (EXPLAIN ANALYZE):
    those a scan returned plus those its filter threw away."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def read(node: dict) -> int:
        own = 0
        if node.get("Relation Name") == "durableruns_step":
            kept, dropped = node["Actual Rows"], node.get("Rows Removed by Filter", 0)
            own = round((kept + dropped) * node["Actual Loops"])
        return own + sum(read(child) for child in node.get("Plans", []))

    return read(plan[0]["Plan"])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="reads Postgres's plans")
def test_a_long_runs_page_reads_a_windows_worth_of_steps_whatever_the_plan(client, bob):
    """The statistics of a real table describe its many short runs, so the planner takes
    a new long run for a handful of steps. It then read all 3,000 of that run's steps
    for the window and again for its waiting steps, on every render and changed poll."""
    short = [make_run(f"short-{i}", steps_used=5) for i in range(200)]
    Step.objects.bulk_create(step_row(run, p) for run in short for p in range(5))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durableruns_step")
    run = make_run("long", status=Run.Status.RUNNING, steps_used=3000, max_steps=5000)
    kinds = {500: Step.Kind.SLEEP, 1500: Step.Kind.APPROVAL, 2999: Step.Kind.TOOL}
    Step.objects.bulk_create(
        step_row(run, p, kind=kinds.get(p, Step.Kind.TOOL), start_ms=p) for p in range(3000)
    )
    client.force_login(bob)
    for query in ("", "?before=2500"):
        with CaptureQueriesContext(connection) as captured:
            body = client.get(_url(run) + query).content.decode()
        assert body.count('class="step step-') == step_window.WINDOW
        read = sum(_step_rows_read(q["sql"]) for q in captured.captured_queries)
        assert read <= 3 * step_window.SPAN, (query, read)


def test_a_gap_wider_than_the_window_still_shows_a_full_window(client, bob):
    """Positions are dense but for a fan-out's branches under way: a gap wider than the
    range the window's query reads falls back to reading without it."""
    run = make_run("gappy", status=Run.Status.RUNNING, steps_used=100, max_steps=1000)
    positions = [*range(50), *range(500, 550)]
    Step.objects.bulk_create(step_row(run, p, start_ms=p) for p in positions)
    client.force_login(bob)
    body = client.get(_url(run)).content.decode()
    assert body.count('class="step step-') == 100
    # An older window whose range falls wholly in the gap still shows what is below it.
    body = client.get(_url(run) + "?before=500").content.decode()
    assert body.count('class="step step-') == 50
