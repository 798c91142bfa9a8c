"""The README's example: an existing LangGraph agent approved through the inbox."""

from __future__ import annotations

import importlib
import sys

import pytest

from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval
from durableruns.services import approvals
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def example(monkeypatch, settings):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = ["refund=langgraph_refund:graph"]
    yield importlib.import_module("langgraph_refund")
    sys.modules.pop("langgraph_refund", None)


def test_a_reviewer_edits_the_refund_and_the_graph_pays_the_edit(example, alice):
    config = {"configurable": {"thread_id": "refund-A-9"}}
    example.graph.invoke({"order": "A-9", "cents": 12000}, config)
    approval = Approval.objects.get(run_id=run_id_for("refund-A-9"))
    assert approval.allowed == ["approve", "edit", "reject"]

    approvals.decide(approval, "edit", user=alice, payload={"cents": 100})
    resume_thread(run_id_for("refund-A-9"))

    assert example.graph.get_state(config).values["log"][-1] == "refunded 100 cents"


def test_an_edit_outside_the_schema_is_refused(example, alice):
    config = {"configurable": {"thread_id": "refund-A-10"}}
    example.graph.invoke({"order": "A-10", "cents": 12000}, config)
    approval = Approval.objects.get(run_id=run_id_for("refund-A-10"))

    with pytest.raises(approvals.InvalidEdit):
        approvals.decide(approval, "edit", user=alice, payload={"cents": 10**9})


def test_a_reviewers_reject_refunds_nothing(example, alice):
    config = {"configurable": {"thread_id": "refund-A-11"}}
    example.graph.invoke({"order": "A-11", "cents": 12000}, config)
    approval = Approval.objects.get(run_id=run_id_for("refund-A-11"))

    approvals.decide(approval, "reject", user=alice, comment="not this one")
    resume_thread(run_id_for("refund-A-11"))

    assert example.graph.get_state(config).values["log"][-2:] == ["reviewer rejected", "no refund"]
