"""Starting, reading, paging and operating runs through the JSON API."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from durableruns.engine import executor
from durableruns.engine.runs import start_run
from durableruns.models import AuditEvent, Effect, Run
from tests.api import agents
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db
WHY = {"reason": "stale order"}  # a cancel says why (audited)

START = {"agent": "t-api", "input": {"text": "hello"}, "run_id": "client-1"}


def _token(username: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("createtoken", username, stdout=out)
    return out.getvalue().strip()


def test_it_starts_a_run_once_per_client_run_id(bob, rung, django_capture_on_commit_callbacks):
    client = client_for(bob)
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post("/api/runs/", START, content_type="application/json")
        again = client.post("/api/runs/", START, content_type="application/json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] == "client-1"
    assert first.json()["created_by"] == "bob"
    assert Run.objects.filter(pk="client-1").count() == 1
    assert rung == ["client-1"]  # one doorbell: the repeat started nothing
    assert AuditEvent.objects.filter(action="run.start", target_id="client-1").count() == 1


def test_it_refuses_to_reuse_a_run_id_for_another_input(bob):
    client = client_for(bob)
    client.post("/api/runs/", START, content_type="application/json")
    other = {**START, "input": {"text": "something else"}}
    response = client.post("/api/runs/", other, content_type="application/json")
    assert response.status_code == 409
    assert "already exists" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"agent": "no-such-agent"}, "detail"),
        ({"agent": "t-api", "run_id": "bad id!"}, "run_id"),
        ({"agent": "t-api", "input": [1, 2]}, "input"),
        ({"input": {}}, "agent"),
    ],
)
def test_it_rejects_a_bad_start_request_with_the_reason(bob, body, field):
    response = client_for(bob).post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400
    assert field in response.json()


def test_a_script_authenticates_with_a_token_from_createtoken(bob, recorded):
    client = Client()
    ok = client.get("/api/runs/recorded/", HTTP_AUTHORIZATION=f"Token {_token('bob')}")
    assert ok.status_code == 200
    assert ok.json()["status"] == "succeeded"
    wrong = client.get("/api/runs/recorded/", HTTP_AUTHORIZATION="Token not-a-real-token")
    assert wrong.status_code == 401


def test_a_token_acts_without_a_csrf_token(bob, pending):
    response = Client(enforce_csrf_checks=True).post(
        "/api/runs/pending/cancel/",
        WHY,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {_token('bob')}",
    )
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"


def test_a_browser_session_needs_the_csrf_token_to_act(bob, pending):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    refused = client.post("/api/runs/pending/cancel/", WHY, content_type="application/json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert Run.objects.get(pk="pending").status == Run.Status.QUEUED
    client.get("/login/")  # sets the csrftoken cookie
    accepted = client.post(
        "/api/runs/pending/cancel/",
        WHY,
        content_type="application/json",
        HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value,
    )
    assert accepted.status_code == 200


def test_it_pages_runs_by_cursor_without_repeats_or_gaps(carol):
    for i in range(7):
        Run.objects.create(
            id=f"r{i}",
            agent="t-api",
            agent_version="1",
            input={},
            max_steps=10,
            max_duration_seconds=60,
        )
    client = client_for(carol)
    seen: list[str] = []
    url = "/api/runs/?limit=3"
    while url:
        page = client.get(url).json()
        seen += [run["id"] for run in page["results"]]
        if len(seen) == 3:  # a run started while paging does not shift later pages
            Run.objects.create(
                id="late",
                agent="t-api",
                agent_version="1",
                input={},
                max_steps=10,
                max_duration_seconds=60,
            )
        url = page["next"]
    assert seen == [f"r{i}" for i in reversed(range(7))]


def test_it_filters_runs_by_status_and_rejects_an_unknown_one(carol, recorded, pending):
    client = client_for(carol)
    queued = client.get("/api/runs/?status=queued").json()["results"]
    assert [run["id"] for run in queued] == ["pending"]
    assert client.get("/api/runs/?status=sleeping").status_code == 400


def test_it_lists_steps_and_effects_of_a_run(carol, recorded):
    client = client_for(carol)
    steps = client.get("/api/runs/recorded/steps/").json()["results"]
    assert [(s["position"], s["kind"], s["name"]) for s in steps] == [
        (0, "compute", "shout"),
        (1, "tool", "t_api_note"),
        (2, "compute", "finish"),
    ]
    effects = client.get("/api/runs/recorded/effects/").json()["results"]
    assert [e["idempotency_key"].split(":")[:3] for e in effects] == [
        ["recorded", "1-t_api_note", "t_api_note"]
    ]
    found = client.get(f"/api/effects/?idempotency_key={effects[0]['idempotency_key']}")
    assert [e["id"] for e in found.json()["results"]] == [effects[0]["id"]]


def test_resume_of_a_finished_run_is_a_conflict(bob, recorded):
    response = client_for(bob).post("/api/runs/recorded/resume/")
    assert response.status_code == 409
    assert Run.objects.get(pk="recorded").status == Run.Status.SUCCEEDED


def test_cancel_twice_is_harmless(bob, pending):
    client = client_for(bob)
    for _ in range(2):
        response = client.post("/api/runs/pending/cancel/", WHY, content_type="application/json")
        assert response.status_code == 200
    event = AuditEvent.objects.get(action="run.cancel", target_id="pending")
    assert event.after["reason"] == WHY["reason"]


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "  "}, {"reason": "x" * 501}])
def test_a_cancel_without_a_reason_is_refused_as_on_the_dashboard(bob, pending, body):
    response = client_for(bob).post(
        "/api/runs/pending/cancel/", body, content_type="application/json"
    )
    assert response.status_code == 400 and "reason" in response.json()
    assert Run.objects.get(pk="pending").status == Run.Status.QUEUED


def test_it_forks_a_run_and_previews_what_would_run_again(
    bob, recorded, rung, django_capture_on_commit_callbacks
):
    client = client_for(bob)
    preview = client.get("/api/runs/recorded/fork-preview/?position=1").json()
    assert [e["tool"] for e in preview] == ["t_api_note"]
    assert client.get("/api/runs/recorded/fork-preview/?position=2").json() == []
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/runs/recorded/fork/",
            {"position": 1, "sandbox": True},
            content_type="application/json",
        )
    assert response.status_code == 201
    fork = response.json()
    assert (fork["parent"], fork["fork_position"], fork["sandbox"]) == ("recorded", 1, True)
    assert fork["id"] in rung
    assert Run.objects.get(pk=fork["id"]).steps.count() == 1
    assert AuditEvent.objects.filter(action="run.fork", target_id="recorded").count() == 1


def test_it_refuses_a_fork_beyond_the_history(bob, recorded):
    response = client_for(bob).post(
        "/api/runs/recorded/fork/", {"position": 9}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "between 0 and 3" in response.json()["detail"]


def test_it_dry_replays_a_run_and_executes_nothing(bob, recorded):
    notes = sum(agents.NOTES.values())
    report = client_for(bob).get("/api/runs/recorded/replay/").json()
    assert report["ok"] is True
    assert [e["status"] for e in report["entries"]] == ["replayed"] * 3
    assert report["result"] == {"said": "HI!"}
    assert sum(agents.NOTES.values()) == notes


def _more_rows(count: int, user) -> None:
    """Finished runs with a resolved effect each, and runs waiting for an approval."""
    for i in range(count):
        run, _ = start_run("t-api", {"text": f"more {i}"}, run_id=f"more-{i}", user=user)
        executor.advance(run.id)
        gated, _ = start_run("t-api-gate", {}, run_id=f"gated-{i}", user=user)
        executor.advance(gated.id)
    Effect.objects.update(resolved_by=user)  # exercise the join to the resolver


@pytest.mark.parametrize("path", ["/api/runs/", "/api/effects/", "/api/approvals/"])
def test_a_page_costs_the_same_queries_for_few_or_many_rows(carol, path, django_assert_num_queries):
    client = client_for(carol)
    _more_rows(1, carol)
    with CaptureQueriesContext(connection) as few:
        client.get(path)
    _more_rows(10, carol)
    with django_assert_num_queries(len(few.captured_queries)):
        page = client.get(path).json()
    assert len(page["results"]) >= 10


def test_it_forks_with_an_edited_input_and_output_and_audits_both(bob, recorded):
    response = client_for(bob).post(
        "/api/runs/recorded/fork/",
        {"position": 1, "input": {"text": "bye"}, "output": {"edited": True}},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    child = Run.objects.get(pk=response.json()["id"])
    assert child.input == {"text": "bye"}
    assert child.steps.get(position=0).result == {"edited": True}
    assert recorded.steps.get(position=0).result != {"edited": True}  # the parent is untouched
    event = AuditEvent.objects.get(action="run.fork", target_id="recorded")
    assert (event.before["input"], event.after["input"]) == ({"text": "hi"}, {"text": "bye"})
    assert event.after["output"] == {"step": 0, "result": {"edited": True}}


def test_an_edited_null_output_is_an_edit_and_an_absent_one_keeps_the_record(bob, recorded):
    client = client_for(bob)
    kept = client.post(
        "/api/runs/recorded/fork/", {"position": 1}, content_type="application/json"
    ).json()
    nulled = client.post(
        "/api/runs/recorded/fork/", {"position": 1, "output": None}, content_type="application/json"
    ).json()
    recorded_result = recorded.steps.get(position=0).result
    assert Run.objects.get(pk=kept["id"]).steps.get(position=0).result == recorded_result
    assert Run.objects.get(pk=nulled["id"]).steps.get(position=0).result is None


HOSTILE_FORKS = [
    ('{"position": 1, "input": {"text": "a\\u0000b"}}', "NUL"),
    ('{"position": 1, "output": "\\ud800"}', "surrogate"),
    ('{"position": 1, "input": {"x": ' + "[" * 200 + "]" * 200 + "}}", "nested deeper"),
    ('{"position": 1, "input": [1, 2]}', "input"),
    ('{"position": 1, "input": "text"}', "input"),
    ('{"position": 0, "output": {"a": 1}}', "no reused step"),
]


@pytest.mark.parametrize(("body", "says"), HOSTILE_FORKS)
def test_it_refuses_a_hostile_edited_fork_with_a_400_and_writes_nothing(bob, recorded, body, says):
    response = client_for(bob).post(
        "/api/runs/recorded/fork/", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert says.lower() in response.content.decode().lower()
    assert Run.objects.filter(parent=recorded).count() == 0
    assert not AuditEvent.objects.filter(action="run.fork").exists()


def test_it_refuses_an_oversize_edited_input_or_output(bob, recorded, settings):
    settings.DURABLERUNS_MAX_PAYLOAD_BYTES = 1000
    client = client_for(bob)
    for field in ("input", "output"):
        body = {"position": 1, field: {"text": "x" * 2000}}
        response = client.post("/api/runs/recorded/fork/", body, content_type="application/json")
        assert response.status_code == 400, response.content
        assert "cannot be stored" in response.json()["detail"]
    assert Run.objects.filter(parent=recorded).count() == 0
