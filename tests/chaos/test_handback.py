"""No run strands: a run whose agent, agent version or LangGraph graph a worker lacks
waits, visibly, and runs once a worker that has it starts (rolling deploys)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest

from durableruns.engine import handback
from durableruns.engine.runs import start_run
from durableruns.langgraph.saver import close_connection
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, Run
from durableruns.services import approvals
from durableruns.services import runs as operations
from tests.chaos import rolling_v2  # noqa: F401 - this process is deploy 2 (starts v2 runs)
from tests.conftest import wait_for
from tests.langgraph.mail import send_graph

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _close_the_saver_connection() -> Iterator[None]:
    yield
    close_connection()  # so the test database can be dropped


def _reason(run_id: str) -> str:
    return handback.waiting_reason(Run.objects.get(pk=run_id))


def _page(client, user, run_id: str) -> str:
    client.force_login(user)
    return html.unescape(client.get(f"/runs/{run_id}/").content.decode())


@pytest.mark.parametrize(
    "old_modules",
    ["tests.chaos.rolling_v1", "durableruns.demo.agents"],
    ids=["worker-without-the-version", "worker-without-the-agent"],
)
def test_a_run_waits_for_a_worker_that_has_its_agent_version(processes, client, bob, old_modules):
    delay = {"DURABLERUNS_HANDBACK_DELAY": "1"}
    old = processes.worker(extra_env={**delay, "DURABLERUNS_AGENT_MODULES": old_modules})
    run, _ = start_run("follow-up", {"name": "Ann"}, run_id=f"rolling-{old_modules[-2:]}")
    assert run.agent_version == "2"

    wait_for(lambda: _reason(run.pk), timeout=60, message="the run to be handed back")
    expected = "waiting for a worker that has agent 'follow-up' version '2'"
    assert expected in _reason(run.pk)
    assert expected.capitalize() in _page(client, bob, run.pk)
    assert Run.objects.get(pk=run.pk).error is None  # waiting, never failed

    processes.kill(old)
    processes.worker(extra_env={**delay, "DURABLERUNS_AGENT_MODULES": "tests.chaos.rolling_v2"})
    wait_for(
        lambda: Run.objects.get(pk=run.pk).status == "succeeded", timeout=60, message="the run"
    )
    assert Run.objects.get(pk=run.pk).result == {"version": "2", "greeting": "hi Ann"}


def test_a_thread_waits_for_a_worker_that_has_its_graph(
    processes, client, alice, bob, tmp_path, monkeypatch
):
    sent_log = tmp_path / "sent.log"
    monkeypatch.setenv("MAIL_SENT_LOG", str(sent_log))
    # A long delay: only the operator's resume brings the thread back in this test.
    env = {"DURABLERUNS_HANDBACK_DELAY": "600", "MAIL_SENT_LOG": str(sent_log)}
    old = processes.worker(extra_env=env)  # no DURABLERUNS_LANGGRAPH_GRAPHS
    send_graph().invoke({"to": "ann@example.com"}, {"configurable": {"thread_id": "handed"}})
    run_id = run_id_for("handed")
    approvals.decide(Approval.objects.get(run_id=run_id), "approve", user=alice)

    wait_for(lambda: _reason(run_id), timeout=60, message="the thread to be handed back")
    assert "waiting for a worker that has LangGraph graph 'mail'" in _reason(run_id)
    assert "Waiting for a worker that has LangGraph graph 'mail'" in _page(client, bob, run_id)
    assert 'id="resume-run"' in _page(client, bob, run_id)

    processes.kill(old)
    processes.worker(
        extra_env={**env, "DURABLERUNS_LANGGRAPH_GRAPHS": "mail=tests.langgraph.mail:send_graph"}
    )
    assert operations.resume(Run.objects.get(pk=run_id), user=bob)
    wait_for(lambda: Run.objects.get(pk=run_id).status == "succeeded", timeout=60, message="run")
    assert _sent(sent_log) == ["ann@example.com"]


def _sent(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []
