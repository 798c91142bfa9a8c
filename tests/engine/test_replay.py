"""Dry replay: agent code against recorded history, nothing executed, nothing written."""

from __future__ import annotations

import copy

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

import durableruns as dr
from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.demo.tools import lookup_order
from durableruns.engine import executor, registry
from durableruns.engine.replay import DIVERGED, REPLAYED, WOULD_EXECUTE, dry_replay
from durableruns.engine.runs import start_run
from durableruns.exports import ExportError, export_run
from durableruns.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"order_id": "A-1001", "payments": "dedupe", "email": "dedupe"}


def finished_run(run_id: str = "recorded") -> Run:
    """A refund-bot run executed in this process against the live stand-in providers."""
    run, _ = start_run("refund-bot", REFUND, run_id=run_id)
    assert executor.advance(run.id) == Run.Status.SUCCEEDED
    return Run.objects.get(pk=run.id)


def _row_counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()}


def _plan(run: dr.Run, task: dict) -> None:
    run.llm("plan", messages=[
        {"role": "system", "content": "You handle refund requests."},
        {"role": "user", "content": f"Refund order {task['order_id']}"},
    ])


def asks_for_another_order(run: dr.Run, task: dict) -> dict:
    _plan(run, task)
    run.call(lookup_order, order_id="A-9999")  # was task["order_id"]
    return {}


def stops_after_planning(run: dr.Run, task: dict) -> dict:
    _plan(run, task)
    return {}


@pytest.fixture
def deploy(monkeypatch):
    """Replace refund-bot's code without changing its version (what replay must catch)."""

    def replace(fn) -> None:
        agent = registry.get_agent("refund-bot", "1")
        monkeypatch.setitem(registry._AGENTS, ("refund-bot", "1"),
                            registry.Agent(agent.name, agent.version, fn))

    return replace


def test_it_replays_every_recorded_step(provider_url):
    run = finished_run()
    report = dry_replay(run)
    assert report.ok
    assert [e.status for e in report.entries] == [REPLAYED] * 5
    assert [e.name for e in report.entries] == ["plan", "lookup_order", "refund", "send_email",
                                                "summary"]
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


def test_it_names_the_diverging_step(provider_url, deploy):
    run = finished_run()
    deploy(asks_for_another_order)
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


def test_it_reports_history_the_code_no_longer_asks_for(provider_url, deploy):
    run = finished_run()
    deploy(stops_after_planning)
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
