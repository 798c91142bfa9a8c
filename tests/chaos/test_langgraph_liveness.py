"""A worker resuming a LangGraph graph holds the run's liveness like a native executor:
the sweeper (dead-owner detection on) never takes over a node that simply runs long."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from durableruns.langgraph.saver import close_connection
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from durableruns.services import approvals
from tests.conftest import TEST_SWEEP_INTERVAL, wait_for
from tests.langgraph.mail import send_graph

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

GRAPHS = "mail=tests.langgraph.mail:send_graph"


@pytest.fixture(autouse=True)
def _close_the_saver_connection() -> Iterator[None]:
    yield
    close_connection()  # so the test database can be dropped


def _sent(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_node_longer_than_three_sweep_intervals_sends_once(
    processes, alice, tmp_path, settings, monkeypatch
):
    sent_log = tmp_path / "sent.log"
    monkeypatch.setenv("MAIL_SENT_LOG", str(sent_log))
    settings.DURABLERUNS_DEAD_OWNER_DETECTION = True
    env = {
        "DURABLERUNS_LANGGRAPH_GRAPHS": GRAPHS,
        "DURABLERUNS_DEAD_OWNER_DETECTION": "1",
        "MAIL_SENT_LOG": str(sent_log),
        "MAIL_SEND_SECONDS": str(3 * TEST_SWEEP_INTERVAL + 1),
    }
    # Two workers, so a wrongful takeover has somewhere to run.
    processes.worker(extra_env=env)
    processes.worker(extra_env=env)
    config = {"configurable": {"thread_id": "slow-mail"}}
    send_graph().invoke({"to": "ann@example.com"}, config)

    approvals.decide(Approval.objects.get(run_id=run_id_for("slow-mail")), "approve", user=alice)

    def settled() -> bool:
        status = Run.objects.values_list("status", flat=True).get(pk=run_id_for("slow-mail"))
        return status == "succeeded" or len(_sent(sent_log)) > 1

    wait_for(settled, timeout=60, message="the graph to finish")
    assert _sent(sent_log) == ["ann@example.com"]
    assert send_graph().get_state(config).values["outcome"] == "sent"
