"""Dry replay and fork from the run page, against the real engine in this process."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

import durableruns as dr
from durableruns.engine import executor, registry
from durableruns.engine.runs import start_run
from durableruns.models import AuditEvent, Run
from tests.web import agents
from tests.web.agents import _value, record_note
from tests.web.dashboard import rung_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db
WHY = {"reason": "try the fix"}  # a fork from the page says why (audited)


@pytest.fixture
def finished(rung) -> Run:
    agents.WRITES.clear()
    run, _ = start_run("t-ledger", {"text": "hello"}, run_id="ledger")
    assert executor.advance(run.id) == Run.Status.SUCCEEDED
    return Run.objects.get(pk=run.id)


def _changed_code(run: dr.Run, task: dict) -> dict:
    run.step("prepare", _value, "prepared")
    run.call(record_note, text="a different note")  # was task["text"]
    return {}


def test_a_dry_replay_of_unchanged_code_replays_every_step(client, bob, finished):
    client.force_login(bob)
    body = client.get(reverse("run-replay", args=[finished.id])).content.decode()
    assert "OK: 3 steps replayed; agent code returned" in body
    assert body.count('class="entry-replayed"') == 3
    assert agents.WRITES["hello"] == 1  # the replay called no tool


def test_a_dry_replay_shows_where_changed_code_diverges(client, bob, finished, monkeypatch):
    monkeypatch.setattr(registry.get_agent("t-ledger", "1"), "fn", _changed_code)
    client.force_login(bob)
    body = client.get(reverse("run-replay", args=[finished.id])).content.decode()
    assert "DIVERGED at step 1" in body
    row = re.search(r'<tr class="entry-diverged">.*?</tr>', body, re.S).group(0)
    assert "#1" in row and "record_note" in row
    assert agents.WRITES == {"hello": 1}


def test_the_fork_page_lists_effects_that_would_execute_again(client, bob, finished):
    client.force_login(bob)
    body = client.get(reverse("run-fork", args=[finished.id]), {"position": 1}).content.decode()
    assert "1 effect would execute again, with new keys" in body
    assert "reuses the 1 recorded step before step 1" in body
    assert finished.effects.get().idempotency_key in body
    assert 'name="sandbox"' in body


def test_the_fork_page_from_after_the_write_lists_no_effect(client, bob, finished):
    client.force_login(bob)
    body = client.get(reverse("run-fork", args=[finished.id]), {"position": 2}).content.decode()
    assert "0 effects would execute again" in body


def test_it_refuses_a_fork_position_outside_the_history(client, bob, finished):
    client.force_login(bob)
    response = client.get(reverse("run-fork", args=[finished.id]), {"position": 9})
    assert response.status_code == 400
    assert "fork position must be between 0 and 3" in response.content.decode()


def test_an_operator_forks_and_the_fork_completes_reusing_earlier_steps(client, bob, finished):
    client.force_login(bob)
    response = client.post(reverse("run-fork", args=[finished.id]), {"position": 1, **WHY})
    child = Run.objects.get(parent=finished)
    assert response.status_code == 302 and response["Location"] == child.get_absolute_url()
    assert child.fork_position == 1 and child.created_by == bob
    assert executor.advance(child.id) == Run.Status.SUCCEEDED
    assert agents.WRITES["hello"] == 2  # a new key, so the write really happened again
    body = client.get(child.get_absolute_url()).content.decode()
    origins = re.findall(r'<span class="origin">([^<]+)</span>', body)
    assert origins == ["reused from the parent run", "executed", "executed"]
    assert AuditEvent.objects.filter(action="run.fork", actor_name="bob").count() == 1
    # The child's own audit trail starts with the fork that made it (recorded on the parent).
    assert [e.action for e in AuditEvent.objects.for_run(child)] == ["run.fork"]
    assert "No human actions yet." not in body


@pytest.mark.parametrize("page", ["run-replay", "run-fork"])
def test_a_reviewer_can_neither_replay_nor_fork(client, alice, finished, page):
    client.force_login(alice)
    assert client.get(reverse(page, args=[finished.id]), {"position": 1}).status_code == 403
    assert client.post(reverse("run-fork", args=[finished.id]), {"position": 1}).status_code == 403
    assert not Run.objects.filter(parent=finished).exists()


def test_anonymous_users_are_sent_to_log_in(client, finished):
    assert client.get(reverse("run-replay", args=[finished.id])).status_code == 302
    assert client.post(reverse("run-fork", args=[finished.id]), {"position": 1}).status_code == 302


def test_an_admin_may_replay(client, carol, finished):
    client.force_login(carol)
    assert client.get(reverse("run-replay", args=[finished.id])).status_code == 200


def test_a_sandboxed_fork_does_not_call_write_tools(client, bob, finished):
    client.force_login(bob)
    client.post(reverse("run-fork", args=[finished.id]), {"position": 1, "sandbox": "on", **WHY})
    child = Run.objects.get(parent=finished)
    assert child.sandbox
    assert executor.advance(child.id) == Run.Status.SUCCEEDED
    assert agents.WRITES["hello"] == 1
    assert child.effects.get().state == "sandboxed"


def test_the_form_is_a_sandbox_by_default_and_a_fork_needs_a_reason(client, bob, finished):
    client.force_login(bob)
    form = client.get(reverse("run-fork", args=[finished.id]), {"position": 1}).content.decode()
    assert '<input type="checkbox" name="sandbox" checked>' in form
    refused = client.post(reverse("run-fork", args=[finished.id]), {"position": 1, "reason": " "})
    assert refused.status_code == 400 and "not forked: give a reason" in refused.content.decode()
    assert not Run.objects.filter(parent=finished).exists()


def test_the_fork_preview_shows_an_edited_input(client, bob, finished):
    client.force_login(bob)
    url = reverse("run-fork", args=[finished.id])
    body = client.post(url, {"position": 1, "input": '{"text": "edited"}', "check": "1"})
    text = body.content.decode()
    assert body.status_code == 200 and "edited input" in text and "&quot;edited&quot;" in text
    assert not Run.objects.filter(parent=finished).exists()  # checking forks nothing


def test_an_operator_forks_with_an_edited_input_and_it_is_audited(client, bob, finished):
    client.force_login(bob)
    edited = {"text": "edited", "api_key": "sk-live-0123456789abcdef0123"}
    response = client.post(
        reverse("run-fork", args=[finished.id]),
        {"position": 1, "input": json.dumps(edited), "reason": "the customer meant this"},
    )
    child = Run.objects.get(parent=finished)
    assert response.status_code == 302
    assert child.input["text"] == "edited"
    assert "sk-live-0123456789abcdef0123" not in json.dumps(child.input)  # redacted as stored
    assert executor.advance(child.id) == Run.Status.SUCCEEDED
    assert agents.WRITES["edited"] == 1  # the new input reached the write after the fork point
    event = AuditEvent.objects.get(action="run.fork")
    assert event.before["input"] == {"text": "hello"}
    assert event.after["input"]["text"] == "edited"
    assert event.after["reason"] == "the customer meant this"


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"text": "a\\u0000b"}', "cannot be stored"),
        ("[" * 100_001, "longer than"),  # the validation layer refuses it first
        ('{"deep": ' + "[" * 5000 + "]" * 5000 + "}", "cannot be stored"),
    ],
)
def test_it_refuses_a_malformed_edited_input_and_forks_nothing(client, bob, finished, typed, says):
    client.force_login(bob)
    response = client.post(reverse("run-fork", args=[finished.id]), {"position": 1, "input": typed})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Run.objects.filter(parent=finished).exists()


def test_an_operator_forks_with_an_edited_output_of_the_last_reused_step(client, bob, finished):
    client.force_login(bob)
    url = reverse("run-fork", args=[finished.id])
    form = {"position": 1, "output": '"prepared by hand"', "reason": "fix the state"}
    preview = client.post(url, {**form, "check": "1"}).content.decode()
    assert "is reused with the <strong>edited output</strong>" in preview
    client.post(url, form)
    child = Run.objects.get(parent=finished)
    assert child.steps.get(position=0).result == "prepared by hand"
    assert executor.advance(child.id) == Run.Status.SUCCEEDED
    assert Run.objects.get(pk=child.id).result["prepared"] == "prepared by hand"
    event = AuditEvent.objects.get(action="run.fork")
    assert event.before["output"]["result"] == "prepared"
    assert event.after["output"] == {"step": 0, "result": "prepared by hand"}


def test_an_unchanged_output_field_forks_as_recorded(client, bob, finished):
    client.force_login(bob)
    client.post(
        reverse("run-fork", args=[finished.id]), {"position": 1, "output": '"prepared"', **WHY}
    )
    child = Run.objects.get(parent=finished)
    assert "output" not in AuditEvent.objects.get(action="run.fork").after
    assert child.steps.get(position=0).result == "prepared"


def test_it_refuses_an_edited_output_that_is_not_json(client, bob, finished):
    client.force_login(bob)
    response = client.post(
        reverse("run-fork", args=[finished.id]), {"position": 1, "output": "{oops"}
    )
    assert (
        response.status_code == 400
        and "edited output is not valid JSON" in response.content.decode()
    )
    assert not Run.objects.filter(parent=finished).exists()


def test_checking_an_edited_input_dry_runs_it_over_the_reused_steps(client, bob, finished):
    """Step #1 wrote the note with the parent's text: reused with another input, agent
    code would ask for a different call there, so the fork would fail at once. The check
    says so, naming the step, before anything is forked."""
    client.force_login(bob)
    url = reverse("run-fork", args=[finished.id])
    body = client.post(url, {"position": 2, "input": '{"text": "edited"}', "check": "1"})
    text = body.content.decode()
    assert body.status_code == 200
    assert 'id="fork-dry-run"' in text and "step #1" in text and "record_note" in text
    assert "would stop at once" in text
    assert not Run.objects.filter(parent=finished).exists()
    assert agents.WRITES == {"hello": 1}  # the dry run called no tool


def test_an_edited_input_no_reused_step_depends_on_is_said_to_replay(client, bob, finished):
    client.force_login(bob)
    url = reverse("run-fork", args=[finished.id])
    body = client.post(url, {"position": 1, "input": '{"text": "edited"}', "check": "1"})
    text = body.content.decode()
    assert "The 1 reused step replays with the edited input" in text
    assert agents.WRITES == {"hello": 1}
