"""A LangGraph interrupt approved in a real Chromium; a real worker resumes the graph."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval
from tests.e2e.browser import log_in
from tests.langgraph.graphs import refund_builder

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

GRAPHS = "refund=tests.langgraph.graphs:refund_graph"


def test_a_reviewer_approves_an_interrupt_and_the_graph_finishes(
    page, processes, live_server, alice, settings
):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = [GRAPHS]
    processes.worker(extra_env={"DURABLERUNS_LANGGRAPH_GRAPHS": GRAPHS})
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "B-7", "cents": 4200}, {"configurable": {"thread_id": "browser-1"}})
    approval = Approval.objects.get(run_id=run_id_for("browser-1"))

    log_in(page, live_server.url, "alice", "/approvals/")
    card = page.locator(f"#approval-{approval.pk}")
    expect(card).to_contain_text("Refund 4200 cents on B-7?")
    expect(card.locator("pre.payload")).to_contain_text('"cents": 4200')
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_contain_text("Approved by alice")

    page.goto(f"{live_server.url}/runs/{run_id_for('browser-1')}/")
    expect(page.locator("#run-status")).to_have_text("idle", timeout=60_000)
    expect(page.locator("#langgraph-thread")).to_contain_text("pay")
    values = graph.get_state({"configurable": {"thread_id": "browser-1"}}).values
    assert values["log"] == ["lookup", "ask_human", "paid"]
