"""`manage.py crashtest` run as a user would, against an agent with a real mistake."""

from __future__ import annotations

import importlib.util
import re

import pytest
from django.core.management import CommandError, call_command

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

BROKEN_MODULE = "tests.chaos.broken_agents"


@pytest.fixture
def misdeclared_agent(settings):
    __import__(BROKEN_MODULE)  # registers the agent here; the workers import it too
    settings.DURABLERUNS_AGENT_MODULES = [*settings.DURABLERUNS_AGENT_MODULES, BROKEN_MODULE]
    settings.DURABLERUNS_PROVIDER_URL = "http://127.0.0.1:9"  # crashtest serves the providers
    return "misdeclared-refund"


def test_it_fails_and_names_the_duplicate_of_a_write_wrongly_declared_idempotent(
    misdeclared_agent, capsys
):
    with pytest.raises(CommandError, match="crashtest failed"):
        call_command(
            "crashtest",
            misdeclared_agent,
            "--input",
            '{"order_id": "A-1001"}',
            "--workers",
            "2",
            "--pool",
            "prefork",
        )
    out = capsys.readouterr().out
    # Killed after the provider executed but before the ledger knew: the resumed run
    # trusts the wrong declaration, calls again, and the provider refunds twice.
    for point in ("after_tool_returned", "during_result_commit"):
        assert re.search(rf"^{point}\s+0-refund_misdeclared\s+resumed\s+1\s+0\s", out, re.M), out
    # Killed before the call: once is once.
    assert re.search(r"^after_effect_started\s+0-refund_misdeclared\s+resumed\s+0\s", out, re.M)
    assert "DUPLICATE in ct-" in out
    assert "2 duplicate executions, 0 lost" in out


def test_it_refuses_an_unknown_agent_before_starting_anything():
    with pytest.raises(CommandError, match="no-such-agent"):
        call_command("crashtest", "no-such-agent")


def test_it_refuses_an_unknown_crash_point_before_starting_anything():
    with pytest.raises(CommandError, match=r"unknown crash point.*after_step_commit"):
        call_command("crashtest", "refund-bot", "--points", "after_lunch")


def test_it_refuses_an_unknown_graph_before_starting_anything():
    with pytest.raises(CommandError, match="no graph 'no-such-graph'"):
        call_command("crashtest", "no-such-graph", "--langgraph")


def test_it_runs_a_graph_only_where_a_crash_kills_one_thread():
    with pytest.raises(CommandError, match="--langgraph runs on --pool solo or prefork"):
        call_command("crashtest", "crash-mail", "--langgraph", "--pool", "threads")


def test_it_asks_for_the_gevent_extra_when_it_is_missing(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CommandError, match=r"pip install 'durableruns\[gevent\]'"):
        call_command("crashtest", "refund-bot", "--pool", "gevent")
