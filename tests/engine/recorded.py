"""Recorded refund-bot runs, and changed agent code to replay them against."""

from __future__ import annotations

import pytest

import durableruns as dr
from durableruns.demo.tools import lookup_order
from durableruns.engine import executor, registry
from durableruns.engine.runs import start_run
from durableruns.models import Run

REFUND = {"order_id": "A-1001", "payments": "dedupe", "email": "dedupe"}


def finished_run(run_id: str = "recorded") -> Run:
    """A refund-bot run executed in this process against the live stand-in providers."""
    run, _ = start_run("refund-bot", REFUND, run_id=run_id)
    assert executor.advance(run.id) == Run.Status.SUCCEEDED
    return Run.objects.get(pk=run.id)


def _plan(run: dr.Run, task: dict) -> None:
    run.llm(
        "plan",
        messages=[
            {"role": "system", "content": "You handle refund requests."},
            {"role": "user", "content": f"Refund order {task['order_id']}"},
        ],
    )


def asks_for_another_order(run: dr.Run, task: dict) -> dict:
    _plan(run, task)
    run.call(lookup_order, order_id="A-9999")  # was task["order_id"]
    return {}


def stops_after_planning(run: dr.Run, task: dict) -> dict:
    _plan(run, task)
    return {}


def deploy(monkeypatch: pytest.MonkeyPatch, fn) -> None:
    """Replace refund-bot's code without changing its version (what replay must catch)."""
    agent = registry.get_agent("refund-bot", "1")
    monkeypatch.setitem(
        registry._AGENTS, ("refund-bot", "1"), registry.Agent(agent.name, agent.version, fn)
    )
