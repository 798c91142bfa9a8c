"""Deciding approvals and resolving escalations through the API wakes the run, once."""

from __future__ import annotations

import pytest

from durableruns.engine import executor
from durableruns.models import AuditEvent, Effect, Run
from tests.api import agents
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db


def _post(user, path: str, body: dict):
    return client_for(user).post(path, body, content_type="application/json")


def test_an_approval_decided_by_api_lets_the_run_finish(alice, gated):
    path = f"/api/approvals/{gated.approval.pk}/decide/"
    response = _post(alice, path, {"decision": "approve", "comment": "fine"})
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["decided_by"]) == ("approved", "alice")
    assert Run.objects.get(pk="gated").status == Run.Status.QUEUED
    assert executor.advance("gated") == Run.Status.SUCCEEDED
    assert Run.objects.get(pk="gated").result == {"sent": True}
    assert sum(agents.NOTES.values()) == 1


def test_a_second_decision_is_a_conflict_that_names_the_first_decider(alice, carol, gated):
    path = f"/api/approvals/{gated.approval.pk}/decide/"
    assert _post(alice, path, {"decision": "reject", "comment": "no"}).status_code == 200
    late = _post(carol, path, {"decision": "approve"})
    assert late.status_code == 409
    assert "already rejected by alice" in late.json()["detail"]
    assert AuditEvent.objects.filter(target_type="approval").count() == 1


def test_ignore_is_refused_unless_the_agent_allows_it(alice, gated):
    path = f"/api/approvals/{gated.approval.pk}/decide/"
    refused = _post(alice, path, {"decision": "ignore"})
    assert refused.status_code == 400 and "does not allow 'ignore'" in refused.json()["detail"]
    gated.approval.allowed = [*gated.approval.allowed, "ignore"]
    gated.approval.save(update_fields=["allowed"])
    ignored = _post(alice, path, {"decision": "ignore"})
    assert (ignored.status_code, ignored.json()["state"]) == (200, "ignored")


def test_an_edit_needs_a_json_object(alice, gated):
    path = f"/api/approvals/{gated.approval.pk}/decide/"
    response = _post(alice, path, {"decision": "edit", "payload": [1, 2]})
    assert response.status_code == 400
    assert "JSON object" in response.json()["detail"]
    edited = _post(alice, path, {"decision": "edit", "payload": {"text": "changed"}})
    assert edited.json()["edited_payload"] == {"text": "changed"}


def test_an_escalation_resolved_as_happened_records_the_result(bob, escalated):
    path = f"/api/effects/{escalated.pk}/resolve/"
    response = _post(
        bob,
        path,
        {"resolution": "happened", "result": {"noted": "HI"}, "note": "checked the provider"},
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["resolution"], body["resolved_by"]) == (
        "resolved",
        "happened",
        "bob",
    )
    assert Run.objects.get(pk="recorded").status == Run.Status.QUEUED


def test_happened_without_a_result_is_refused(bob, escalated):
    response = _post(bob, f"/api/effects/{escalated.pk}/resolve/", {"resolution": "happened"})
    assert response.status_code == 400
    assert Effect.objects.get(pk=escalated.pk).state == Effect.State.UNKNOWN


def test_only_an_unknown_outcome_can_be_resolved(bob, recorded):
    effect = recorded.effects.get()
    response = _post(bob, f"/api/effects/{effect.pk}/resolve/", {"resolution": "aborted"})
    assert response.status_code == 409
    assert Run.objects.get(pk="recorded").status == Run.Status.SUCCEEDED
