"""Starting a run from the dashboard (operators and admins), and agents' input schemas:
an input that does not fit is refused before anything is stored, on every path (the
form, the API, the engine). Refused input is a 400 that says why and keeps the text."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

import durableruns as dr
from durableruns.engine import doorbell
from durableruns.engine.errors import UsageError
from durableruns.engine.runs import start_run
from durableruns.models import AuditEvent, Run
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "pattern": "^A-[0-9]+$"}},
    "required": ["order_id"],
    "additionalProperties": False,
}


@dr.agent("t-schema", version="1", input_schema=SCHEMA)
def schema_bot(run: dr.Run, task: dict) -> dict:
    """Refunds one order (for the start form's tests)."""
    return task


@pytest.fixture(autouse=True)
def rung(monkeypatch) -> list[str]:
    rings: list[str] = []
    monkeypatch.setattr(doorbell, "ring", lambda run_id, countdown=None: rings.append(run_id))
    return rings


def _post(user, **form) -> tuple[int, str, str]:
    client = Client()
    client.force_login(user)
    response = client.post(reverse("run-start"), form)
    return response.status_code, response.content.decode(), response.get("Location", "")


def test_an_operator_starts_a_run_and_lands_on_its_page(bob, rung):
    client = Client()
    client.force_login(bob)
    page = client.get(reverse("run-start"), {"agent": "t-schema"}).content.decode()
    assert '<option value="t-schema" selected>' in page and "&quot;order_id&quot;" in page
    status, _, location = _post(bob, agent="t-schema", input='{"order_id": "A-7"}', run_id="s-1")
    assert (status, location) == (302, "/runs/s-1/")
    run = Run.objects.get(pk="s-1")
    assert (run.agent, run.input, run.created_by) == ("t-schema", {"order_id": "A-7"}, bob)
    assert rung == ["s-1"]
    assert AuditEvent.objects.get(action="run.start").actor_name == "bob"


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"agent": "t-schema", "input": '{"order_id": '}, "not valid JSON"),
        ({"agent": "t-schema", "input": "[1, 2]"}, "must be a JSON object"),
        ({"agent": "t-schema", "input": '{"order_id": "B-1"}'}, "does not fit agent"),
        ({"agent": "t-schema", "input": '{"order_id": "A-1", "x": 1}'}, "does not fit agent"),
        ({"agent": "nobody", "input": "{}"}, "unknown agent"),
        ({"agent": "t-schema", "input": '{"order_id": "A-1"}', "run_id": "../x"}, "run id"),
    ],
)
def test_refused_input_says_why_keeps_the_text_and_stores_nothing(bob, rung, form, says):
    status, body, _ = _post(bob, **form)
    assert status == 400 and says in body and "Not started" in body
    assert form["input"].replace('"', "&quot;") in body
    assert not Run.objects.exists() and not rung and not AuditEvent.objects.exists()


def test_an_input_over_the_form_limit_or_with_a_nul_is_refused_before_the_view(bob):
    for text in ("1" * 100_001, '{"order_id": "A-1\x00"}'):
        status, body, _ = _post(bob, agent="t-schema", input=text)
        assert status == 400 and "input" in body
    assert not Run.objects.exists()


def test_a_run_id_taken_by_another_input_is_refused(bob):
    _post(bob, agent="t-schema", input='{"order_id": "A-1"}', run_id="taken")
    status, body, _ = _post(bob, agent="t-schema", input='{"order_id": "A-2"}', run_id="taken")
    assert status == 400 and "already exists" in body
    assert Run.objects.get(pk="taken").input == {"order_id": "A-1"}


def test_the_api_and_the_engine_refuse_an_input_that_does_not_fit(bob):
    response = client_for(bob).post(
        "/api/runs/", {"agent": "t-schema", "input": {}}, content_type="application/json"
    )
    assert response.status_code == 400 and "order_id" in response.json()["detail"]
    with pytest.raises(UsageError, match="does not fit"):
        start_run("t-schema", {"order_id": 7})
    assert not Run.objects.exists()


def test_an_input_schema_that_is_not_one_is_refused_where_the_agent_is_defined():
    with pytest.raises(UsageError, match="not a valid JSON Schema"):
        dr.agent("t-bad-schema", input_schema={"type": "no-such-type"})
    with pytest.raises(UsageError, match="a dict"):
        dr.agent("t-bad-schema", input_schema=["type"])


def test_a_start_without_the_csrf_token_is_refused(bob):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    response = client.post(
        reverse("run-start"), {"agent": "t-schema", "input": '{"order_id": "A-1"}'}
    )
    assert response.status_code == 403 and not Run.objects.exists()


def test_an_empty_runs_list_points_an_operator_to_the_start_form(client, bob, alice):
    client.force_login(bob)
    body = client.get("/").content.decode()
    assert "No runs match. Start one with “Start a run” above" in body
    assert f'href="{reverse("run-start")}"' in body
    client.force_login(alice)  # a reviewer may not start one
    assert "Start a run" not in client.get("/").content.decode()
