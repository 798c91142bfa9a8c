"""Dry replay: agent code against recorded history, nothing executed, nothing written."""

from __future__ import annotations

import copy

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine.replay import DIVERGED, REPLAYED, WOULD_EXECUTE
from durableruns.services.exports import ExportError, export_run
from durableruns.services.runs import dry_replay
from tests.engine.recorded import (
    asks_for_another_order,
    deploy,
    finished_run,
    stops_after_planning,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("rung")]


def _row_counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()}


def test_it_replays_every_recorded_step(provider_url):
    run = finished_run()
    report = dry_replay(run)
    assert report.ok
    assert [e.status for e in report.entries] == [REPLAYED] * 5
    assert [e.name for e in report.entries] == [
        "plan",
        "lookup_order",
        "refund",
        "send_email",
        "summary",
    ]
    assert report.ending == "returned"
    assert report.result == run.result


def test_it_touches_no_tool_no_model_and_writes_nothing(provider_url):
    run = finished_run()
    providers, models, rows = ProviderCall.objects.count(), ModelCall.objects.count(), _row_counts()
    with CaptureQueriesContext(connection) as queries:
        report = dry_replay(run)
    assert report.ok and report.replayed == 5
    assert ProviderCall.objects.count() == providers
    assert ModelCall.objects.count() == models
    assert _row_counts() == rows
    statements = [q["sql"].lstrip().split()[0].upper() for q in queries.captured_queries]
    assert statements == ["SELECT"]  # the history, and nothing else


def test_it_names_the_diverging_step(provider_url, monkeypatch):
    run = finished_run()
    deploy(monkeypatch, asks_for_another_order)
    report = dry_replay(run)
    assert not report.ok
    assert [e.status for e in report.entries] == [REPLAYED, DIVERGED]
    divergence = report.divergence
    assert divergence.position == 1
    assert divergence.expected.startswith("tool step 'lookup_order'")
    assert divergence.expected != divergence.actual
    assert "non-determinism at step 1" in report.summary()


def test_it_reports_where_agent_code_would_execute_a_new_step(provider_url):
    doc = export_run(finished_run())
    doc["steps"] = doc["steps"][:3]  # as if the run had stopped before the email
    report = dry_replay(doc)
    assert report.ok
    assert [e.status for e in report.entries] == [REPLAYED] * 3 + [WOULD_EXECUTE]
    assert report.entries[-1].name == "send_email"
    assert report.ending == "would_execute"


def test_it_reports_history_the_code_no_longer_asks_for(provider_url, monkeypatch):
    run = finished_run()
    deploy(monkeypatch, stops_after_planning)
    report = dry_replay(run)
    assert not report.ok
    assert [e.status for e in report.entries] == [REPLAYED, DIVERGED]
    assert report.divergence.position == 1
    assert report.divergence.actual == "agent code returned (no step)"


def test_it_refuses_a_malformed_document(provider_url):
    doc = export_run(finished_run())
    broken = copy.deepcopy(doc)
    broken["steps"][2]["kind"] = "teleport"
    with pytest.raises(ExportError, match=r"steps\[2\]: kind 'teleport'"):
        dry_replay(broken)


def test_an_exported_run_replays_without_touching_the_database(provider_url):
    doc = export_run(finished_run())
    with CaptureQueriesContext(connection) as queries:
        report = dry_replay(doc)
    assert report.ok and report.replayed == 5
    assert queries.captured_queries == []
