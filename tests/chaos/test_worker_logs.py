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

    # Celery writes each task's outcome; the resume's comes after the graph module ran
    # django.setup(). Every task the worker received must report how it ended.
    def every_task_reported() -> bool:
        log = processes.logs()
        # Any task (the sweep leader's retention job may run too): each "received" line
        # needs its "succeeded" line, and the resume must be among them.
        received, succeeded = log.count("] received"), log.count("] succeeded in")
        return "advance_run[" in log and 0 < succeeded == received

    try:
        wait_for(every_task_reported, timeout=20, message="the tasks' lines")
    except AssertionError:
        raise AssertionError(f"a task went unreported:\n{processes.logs()}") from None
