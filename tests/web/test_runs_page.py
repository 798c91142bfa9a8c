"""The runs list: counts, filters, search, keyset pagination, live statuses, roles."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse

from durableruns.models import Run
from durableruns.web import keyset, views
from durableruns.web.filters import RunFilters
from tests.web.dashboard import T0, make_effect, make_run

pytestmark = pytest.mark.django_db
URL = reverse("runs")


def _shown(response) -> list[str]:
    return re.findall(r'data-run="([^"]+)"', response.content.decode())


def test_it_redirects_anonymous_users_to_log_in(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_refuses_a_user_without_a_role(client, dave):
    client.force_login(dave)
    assert client.get(URL).status_code == 403


@pytest.mark.parametrize("actor", ["alice", "bob", "carol"])
def test_it_shows_runs_to_every_role(client, request, actor):
    make_run("visible-run")
    client.force_login(request.getfixturevalue(actor))
    response = client.get(URL)
    assert response.status_code == 200
    assert _shown(response) == ["visible-run"]


def test_it_hides_bulk_actions_from_a_reviewer(client, alice):
    make_run(status=Run.Status.RUNNING)
    client.force_login(alice)
    body = client.get(URL).content.decode()
    assert "Cancel selected" not in body
    assert 'name="run"' not in body


def test_it_offers_bulk_actions_to_an_operator(client, bob):
    make_run(status=Run.Status.RUNNING)
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert "Cancel selected" in body and "Resume all matching" in body


def test_it_counts_runs_per_status(client, bob):
    for status in ["running", "running", "failed", "succeeded"]:
        make_run(status=status)
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert re.search(r'data-status-count="running">2<', body)
    assert re.search(r'data-status-count="failed">1<', body)
    assert re.search(r'data-status-count="cancelled">0<', body)


def test_it_caps_large_counts_instead_of_counting_every_run(client, bob, monkeypatch):
    monkeypatch.setattr(views, "COUNT_CAP", 3)
    for status in ["failed"] * 5 + ["running"] * 3:
        make_run(status=status)
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert re.search(r'data-status-count="failed">3\+<', body)
    assert re.search(r'data-status-count="running">3<', body)


def test_it_filters_by_status(client, bob):
    make_run("ok-run", status="succeeded")
    make_run("bad-run", status="failed")
    client.force_login(bob)
    assert _shown(client.get(URL, {"status": "failed"})) == ["bad-run"]


def test_it_filters_by_agent_and_version(client, bob):
    make_run("refund-v1", agent="refund-bot", version="1")
    make_run("refund-v2", agent="refund-bot", version="2")
    make_run("research-v1", agent="research-bot", version="1")
    client.force_login(bob)
    assert sorted(_shown(client.get(URL, {"agent": "refund-bot"}))) == ["refund-v1", "refund-v2"]
    assert _shown(client.get(URL, {"agent": "refund-bot", "version": "2"})) == ["refund-v2"]


def test_it_filters_by_time_range(client, bob):
    make_run("early", created_at=T0)
    make_run("middle", created_at=T0 + timedelta(hours=1))
    make_run("late", created_at=T0 + timedelta(hours=2))
    client.force_login(bob)
    response = client.get(URL, {"since": "2026-11-01T12:30", "until": "2026-11-01T13:30"})
    assert _shown(response) == ["middle"]


def test_it_says_when_a_date_is_unreadable(client, bob):
    make_run("any")
    client.force_login(bob)
    response = client.get(URL, {"since": "yesterday"})
    assert "Ignored an unreadable date in: since" in response.content.decode()
    assert _shown(response) == ["any"]


def test_it_finds_a_run_by_id(client, bob):
    make_run("needle")
    make_run("haystack")
    client.force_login(bob)
    assert _shown(client.get(URL, {"q": "needle"})) == ["needle"]


def test_it_finds_a_run_by_an_effect_idempotency_key(client, bob):
    run = make_run("refunded-once")
    make_run("other")
    effect = make_effect(run, 2)
    client.force_login(bob)
    assert _shown(client.get(URL, {"q": effect.idempotency_key})) == ["refunded-once"]


def test_it_finds_a_run_by_a_model_call_key_that_is_not_in_the_ledger(client, bob):
    make_run("planned")
    client.force_login(bob)
    assert _shown(client.get(URL, {"q": "planned:0-plan:llm:0123456789abcdef"})) == ["planned"]


def test_it_pages_newest_first_by_keyset(client, bob, settings, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 3)
    for minute in range(7):
        make_run(f"r{minute}", created_at=T0 + timedelta(minutes=minute))
    client.force_login(bob)
    first = client.get(URL)
    assert _shown(first) == ["r6", "r5", "r4"]
    second = client.get(URL, {"cursor": first.context["next_cursor"]})
    assert _shown(second) == ["r3", "r2", "r1"]
    third = client.get(URL, {"cursor": second.context["next_cursor"]})
    assert _shown(third) == ["r0"]
    assert third.context["next_cursor"] is None


def test_it_keeps_pages_stable_when_runs_are_inserted_between_loads(client, bob, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 3)
    for minute in range(6):
        make_run(f"r{minute}", created_at=T0 + timedelta(minutes=minute))
    client.force_login(bob)
    first = client.get(URL)
    for minute in range(10, 15):  # newer runs arrive while the operator reads page one
        make_run(f"new{minute}", created_at=T0 + timedelta(minutes=minute))
    second = client.get(URL, {"cursor": first.context["next_cursor"]})
    assert _shown(first) == ["r5", "r4", "r3"]
    assert _shown(second) == ["r2", "r1", "r0"]


def test_it_pages_runs_created_at_the_same_instant_without_losing_any(client, bob, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    for name in ["a", "b", "c", "d", "e"]:
        make_run(name, created_at=T0)
    client.force_login(bob)
    seen, cursor = [], None
    while True:
        response = client.get(URL, {"cursor": cursor} if cursor else {})
        seen += _shown(response)
        cursor = response.context["next_cursor"]
        if not cursor:
            break
    assert seen == ["a", "b", "c", "d", "e"]


def test_it_refuses_a_tampered_cursor(client, bob):
    make_run("only")
    client.force_login(bob)
    response = client.get(URL, {"cursor": "not-a-cursor!!"})
    assert response.status_code == 400
    assert "cursor" in response.content.decode()


def test_it_polls_statuses_while_a_shown_run_is_active(client, bob):
    make_run("busy", status=Run.Status.RUNNING)
    client.force_login(bob)
    body = client.get(URL).content.decode()
    poller = re.search(r'<div id="run-poller"[^>]*>', body).group(0)
    assert 'hx-trigger="every 2s"' in poller
    assert "run=busy" in poller


def test_a_deeper_page_does_not_poll_when_every_shown_run_has_finished(client, bob, monkeypatch):
    monkeypatch.setattr(views, "PAGE_SIZE", 1)
    make_run("done", status=Run.Status.SUCCEEDED, created_at=T0)
    make_run("gone", status=Run.Status.CANCELLED, created_at=T0 + timedelta(seconds=1))
    client.force_login(bob)
    first = client.get(URL).content.decode()
    older = re.search(r'href="\?&amp;cursor=([^"]+)" rel="next"', first).group(1)
    body = client.get(URL, {"cursor": older.replace("%3D", "=")}).content.decode()
    assert re.search(r'<div id="run-poller">', body)
    assert "hx-trigger" not in body


def test_the_first_page_polls_for_new_runs_and_counts(client, bob):
    make_run("done", status=Run.Status.SUCCEEDED, created_at=T0)
    client.force_login(bob)
    poller = re.search(r'<div id="run-poller"[^>]*>', client.get(URL).content.decode()).group(0)
    assert 'hx-trigger="every 2s"' in poller and "newer=" in poller
    query = re.search(r'hx-get="([^"]+)"', poller).group(1).replace("&amp;", "&")
    make_run("arrived", status=Run.Status.QUEUED, created_at=T0 + timedelta(seconds=5))
    live = client.get(query, headers={"HX-Request": "true"}).content.decode()
    assert "1 new run since this page loaded" in live
    assert '<strong data-status-count="queued">1</strong>' in live


def test_its_status_poll_swaps_fresh_statuses_in_by_run_id(client, bob):
    busy = make_run("busy", status=Run.Status.RUNNING)
    make_run("done", status=Run.Status.SUCCEEDED)
    client.force_login(bob)
    poll = reverse("run-statuses") + "?run=gone-meanwhile&run=busy&run=done"
    live = client.get(poll, headers={"HX-Request": "true"}).content.decode()
    # A shown run deleted meanwhile shifts nothing: each cell is named by its run.
    assert 'id="status-busy" hx-swap-oob="true" class="status status-running"' in live
    assert 'hx-trigger="every 2s"' in live
    Run.objects.filter(pk=busy.pk).update(status=Run.Status.SUCCEEDED)
    final = client.get(poll, headers={"HX-Request": "true"}).content.decode()
    assert 'id="status-busy" hx-swap-oob="true" class="status status-succeeded"' in final
    assert "hx-trigger" not in final


def test_it_shows_steps_of_a_budget_and_bare_steps_without_one(client, bob):
    make_run("budgeted", steps_used=5, max_steps=20)
    make_run("unbounded", status=Run.Status.RUNNING, steps_used=5, max_steps=0)
    client.force_login(bob)
    listed = client.get(URL).content.decode()
    polled = client.get(reverse("run-statuses") + "?run=unbounded").content.decode()
    assert '<span id="steps-budgeted">5 / 20</span>' in listed
    assert '<span id="steps-unbounded">5</span>' in listed
    assert '<span id="steps-unbounded" hx-swap-oob="true">5</span>' in polled


def test_it_shows_full_ids_duration_finished_and_error(client, bob):
    long_id = "crash-test-refund-bot-after-effect-started-step-0002-attempt-1"
    make_run(
        long_id,
        status=Run.Status.FAILED,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=75),
        error={"message": "card declined"},
    )
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert f'<code class="full-id">{long_id}</code>' in body
    assert "1 min 15 s" in body and "card declined" in body


def test_it_finds_runs_by_an_id_prefix(client, bob):
    make_run("crash-a-1")
    make_run("crash-a-2")
    make_run("crash-b-1")
    client.force_login(bob)
    assert sorted(_shown(client.get(URL, {"q": "crash-a"}))) == ["crash-a-1", "crash-a-2"]
    assert _shown(client.get(URL, {"q": "crash-a%"})) == []  # LIKE wildcards are literal


def test_it_filters_on_error_text(client, bob):
    make_run("declined", status=Run.Status.FAILED, error={"message": "Card DECLINED by bank"})
    make_run("timeout", status=Run.Status.FAILED, error={"message": "timed out"})
    make_run("fine")
    client.force_login(bob)
    assert _shown(client.get(URL, {"error": "declined"})) == ["declined"]
    assert _shown(client.get(URL, {"error": "100%"})) == []


def test_it_filters_on_json_input_fields(client, bob):
    for run_id, order in [("wanted", "A-1001"), ("other", "A-2002")]:
        run = make_run(run_id)
        Run.objects.filter(pk=run.pk).update(input={"order_id": order, "cents": 1200})
    client.force_login(bob)
    assert _shown(client.get(URL, {"input": '{"order_id": "A-1001"}'})) == ["wanted"]
    assert sorted(_shown(client.get(URL, {"input": '{"cents": 1200}'}))) == ["other", "wanted"]


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("q", "abc\x00def", "NUL"),
        ("error", "x" * 256, "longer than 255"),
        ("input", "{not json", "not valid JSON"),
        ("input", "[1, 2]", "must be a JSON object"),
        ("input", "[" * 5000 + "]" * 5000, "longer than"),  # the validation layer: 2048
    ],
)
def test_it_refuses_a_malformed_filter_with_a_400(client, bob, name, value, says):
    make_run("any")
    client.force_login(bob)
    response = client.get(URL, {name: value})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert _shown(response) == []


def test_it_escapes_untrusted_text(client, bob):
    make_run("x", agent="<script>alert(1)</script>")
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;" in body


@pytest.mark.parametrize("rows", [5, 50])
def test_it_uses_a_constant_number_of_queries(client, bob, django_assert_num_queries, rows):
    for index in range(rows):
        make_run(status=Run.Status.RUNNING if index % 2 else Run.Status.FAILED, created_by=bob)
    client.force_login(bob)
    # session, user, permissions (own and the roles', one query), runs page, status counts,
    # the user's saved views
    with django_assert_num_queries(6):
        response = client.get(URL)
    assert len(_shown(response)) == rows


def test_counts_under_a_search_are_bounded_and_marked_as_lower_bounds(client, bob, monkeypatch):
    monkeypatch.setattr(views, "SEARCH_CAP", 2)
    for index in range(4):
        make_run(f"batch-{index}", status=Run.Status.FAILED)
    make_run("other", status=Run.Status.FAILED)
    client.force_login(bob)
    body = client.get(URL, {"q": "batch-"}).content.decode()
    assert '<strong data-status-count="failed">3+</strong>' in body
    exact = client.get(URL, {"q": "other"}).content.decode()
    assert '<strong data-status-count="failed">1</strong>' in exact


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_common_error_text_walks_the_newest_runs_and_a_rare_one_the_trigrams():
    """The planner knows how many runs an error text matches (0010_error_statistics):
    a common text pages down the run_created index and stops at the page's last match,
    instead of fetching and sorting every match; a rare one still uses the trigrams."""
    declined = {"type": "PermanentError", "message": "card declined"}
    Run.objects.bulk_create(
        Run(
            id=f"gen-{i:06d}",
            agent="refund-bot",
            agent_version="1",
            input={},
            status=Run.Status.FAILED if i % 20 == 0 else Run.Status.SUCCEEDED,
            error=({**declined, "message": f"card declined A-{i}"} if i % 20 == 0 else None),
            max_steps=20,
            max_duration_seconds=60,
            created_at=T0 + timedelta(seconds=i),
        )
        for i in range(50_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durableruns_run")

    def page(text: str) -> str:
        filtered = RunFilters(error=text).apply(Run.objects.all())
        return _plan(keyset.runs_after(filtered, None)[: views.PAGE_SIZE + 1])

    common = page("declined")
    assert "run_created" in common and "run_error_message" not in common, common
    rare = page("A-4242")
    assert "run_error_message" in rare, rare
