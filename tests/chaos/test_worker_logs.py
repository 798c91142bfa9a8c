"""A worker's log keeps flowing after it loads a LangGraph graph whose module calls
django.setup() (as the README's example does), which configures logging again while
Celery has stdout and stderr redirected into logging."""

from __future__ import annotations

import pytest

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from durableruns.services import approvals
from tests.conftest import wait_for
from tests.langgraph.graphs import refund_builder

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

GRAPHS = "refund=tests.langgraph.graphs_calling_setup:refund_graph"


def test_task_lines_keep_coming_after_a_graph_loads(processes, alice, settings):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = [GRAPHS]
    processes.worker(extra_env={"DURABLERUNS_LANGGRAPH_GRAPHS": GRAPHS})
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "L-1"}, {"configurable": {"thread_id": "logs-1"}})
    run_id = run_id_for("logs-1")

    approvals.decide(Approval.objects.get(run_id=run_id), "approve", user=alice)

    wait_for(
        lambda: Run.objects.get(pk=run_id).status == "succeeded", timeout=60, message="resumed"
    )

    # Celery writes each task's outcome. The resume is the only advance_run task here,
    # and it loads the graph, so its line comes after the module ran django.setup().
    def resume_reported() -> bool:
        return any(
            "advance_run[" in line and "] succeeded in" in line
            for line in processes.logs().splitlines()
        )

    try:
        wait_for(resume_reported, timeout=20, message="the resume's line")
    except AssertionError:
        raise AssertionError(f"a task went unreported:\n{processes.logs()}") from None
