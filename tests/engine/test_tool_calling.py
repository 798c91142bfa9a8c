"""Tool-calling models: run.llm records the whole assistant message, run.call_tools runs
its calls, and tokens and dollars are counted, priced and budgeted. The model is the
stand-in on real HTTP (durableruns/demo/model.py), served by the live server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

import durableruns as dr
import tests.agents_toolcalling  # noqa: F401 - registers support-bot
from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.demo.tools import lookup_order, refund
from durableruns.engine import replay
from durableruns.engine.llm import Reply
from durableruns.engine.runs import start_run
from durableruns.models import Run, Step

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = {"question": "Where is my refund for order A-1001?"}


@pytest.fixture
def model_url(provider_url, settings):
    settings.DURABLERUNS_MODEL_URL = f"{provider_url}/providers/v1"
    return settings.DURABLERUNS_MODEL_URL


def _llm_results(run_id: str) -> list[dict]:
    steps = Step.objects.filter(run_id=run_id, kind=Step.Kind.LLM).order_by("position")
    return [step.result for step in steps]


def test_it_records_the_tool_calls_of_a_reply(drive, model_url):
    run, _ = start_run("support-bot", QUESTION, run_id="tools-1")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    first = _llm_results(run.id)[0]
    assert [call["name"] for call in first["tool_calls"]] == [
        "lookup_order",
        "refund",
        "send_email",
    ]
    assert json.loads(first["tool_calls"][1]["arguments"]) == {"order_id": "A-1001", "cents": 4500}
    assert first["finish_reason"] == "tool_calls"
    assert first["usage"]["prompt_tokens"] > 0
    assert run.result.startswith("Done. ")
    executed = ProviderCall.objects.filter(outcome=ProviderCall.Outcome.EXECUTED)
    assert sorted(executed.values_list("provider", flat=True)) == ["email", "payments"]


def test_it_gives_the_model_each_result_as_a_tool_message(drive, model_url):
    run, _ = start_run("support-bot", QUESTION, run_id="tools-2")
    drive(run.id)
    second = Step.objects.get(run_id=run.id, name="turn-1")
    messages = second.input["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert [m["tool_call_id"] for m in messages[2:]] == ["call_0", "call_1", "call_2"]
    assert json.loads(messages[2]["content"])["id"] == "A-1001"


def test_a_dry_replay_gets_the_same_tool_calls_without_calling_the_model(drive, model_url):
    run, _ = start_run("support-bot", QUESTION, run_id="tools-3")
    drive(run.id)
    calls = ModelCall.objects.count()
    report = replay.dry_replay(Run.objects.get(pk=run.id))
    # The tool steps' argument fingerprints come from the replayed tool calls.
    assert report.ending == "returned", report
    assert {entry.status for entry in report.entries} == {replay.REPLAYED}
    assert ModelCall.objects.count() == calls == 2


@dr.agent("support-bot-anthropic", version="1", max_steps=20)
def anthropic_bot(run: dr.Run, task: dict) -> str:
    tools = [
        {
            "name": "lookup_order",
            "input_schema": {"type": "object", "properties": {"order_id": {"default": "A-1001"}}},
        }
    ]
    messages = [{"role": "user", "content": task["question"]}]
    reply = run.llm("turn-0", messages=messages, tools=tools, model="claude-3-5-haiku-latest")
    run.call_tools(reply, [lookup_order], messages=messages)
    return run.llm("turn-1", messages=messages, tools=tools, model="claude-3-5-haiku-latest")


def test_it_runs_anthropic_tool_use_blocks(drive, model_url, settings):
    settings.DURABLERUNS_MODEL_API = "anthropic"
    run, _ = start_run("support-bot-anthropic", QUESTION, run_id="tools-anthropic")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    first = _llm_results(run.id)[0]
    assert first["shape"] == "anthropic"
    assert first["tool_calls"][0]["name"] == "lookup_order"
    assert first["finish_reason"] == "tool_use"
    sent = Step.objects.get(run_id=run.id, name="turn-1").input["messages"]
    assert sent[1]["content"][1]["type"] == "tool_use"
    result = sent[2]["content"][0]
    assert (result["type"], result["tool_use_id"], result["is_error"]) == (
        "tool_result",
        "toolu_0",
        False,
    )
    assert run.result.startswith("Done. ")
    assert run.cost > 0  # priced by the "claude-3-5-haiku" entry (a prefix of the name)


class MistakenModel:
    """Asks for a tool that does not exist and for one with arguments that are not JSON."""

    def complete(self, *, messages, agent, step, idempotency_key, **params):
        ModelCall.objects.create(agent=agent, step=step, idempotency_key=idempotency_key)
        calls = [
            {"id": "a", "function": {"name": "delete_everything", "arguments": "{}"}},
            {"id": "b", "function": {"name": "refund", "arguments": '{"order_id": '}},
            {"id": "c", "function": {"name": "refund", "arguments": '{"order": "A-1"}'}},
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        return {"choices": [{"message": message, "finish_reason": "tool_calls"}]}


@dr.agent("mistaken-bot", version="1")
def mistaken_bot(run: dr.Run, task: dict) -> list:
    reply = run.llm("turn-0", messages=[{"role": "user", "content": "hi"}])
    return [json.loads(m["content"])["error"] for m in run.call_tools(reply, [refund])[1:]]


def test_the_models_mistakes_become_error_results_it_can_read(drive, settings):
    settings.DURABLERUNS_MODEL_CLIENT = "tests.engine.test_tool_calling.MistakenModel"
    run, _ = start_run("mistaken-bot", {}, run_id="mistaken")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    unknown, not_json, bad_args = run.result
    assert "unknown tool 'delete_everything' (tools: refund)" in unknown
    assert "invalid JSON arguments" in not_json
    assert "tool 'refund' called with bad arguments" in bad_args
    assert not ProviderCall.objects.exists()


class LooseModel:
    """An OpenAI-compatible server that sends arguments as an object, no call id, and a
    number as content."""

    def complete(self, *, messages, agent, step, idempotency_key, **params):
        ModelCall.objects.create(agent=agent, step=step, idempotency_key=idempotency_key)
        call = {"function": {"name": "refund", "arguments": {"order_id": "A-1", "cents": 1}}}
        message = {"role": "assistant", "content": 42, "tool_calls": [call]}
        return {"choices": [{"message": message}], "usage": {"prompt_tokens": "3"}}


@dr.agent("loose-bot", version="1")
def loose_bot(run: dr.Run, task: dict) -> list:
    reply = run.llm("turn-0", messages=[{"role": "user", "content": "hi"}])
    return [reply.content, reply.usage.prompt_tokens, [c.arguments for c in reply.tool_calls]]


def test_it_records_a_loose_servers_reply_in_one_shape(drive, settings):
    settings.DURABLERUNS_MODEL_CLIENT = "tests.engine.test_tool_calling.LooseModel"
    run, _ = start_run("loose-bot", {}, run_id="loose")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == ["42", 3, [{"cents": 1, "order_id": "A-1"}]]
    recorded = _llm_results(run.id)[0]["tool_calls"]
    assert recorded == [
        {"id": "", "name": "refund", "arguments": '{"cents": 1, "order_id": "A-1"}'}
    ]
    assert replay.dry_replay(Run.objects.get(pk=run.id)).ending == "returned"


def test_a_price_table_entry_without_prices_is_refused_at_start():
    code = (
        "import django, os; os.environ['DURABLERUNS_MODEL_PRICES'] = "
        '\'{"mine": {"input": "cheap", "output": 1}}\'; '
        "import durableruns.settings"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0
    assert "DURABLERUNS_MODEL_PRICES['mine'] needs 'input' and 'output'" in done.stderr


def test_a_reply_still_reads_as_its_text():
    reply = Reply.from_record({"content": '{"actions": []}', "usage": {}})
    assert json.loads(reply) == {"actions": []}
    assert f"{reply}!" == '{"actions": []}!' and reply == '{"actions": []}'
    assert reply.tool_calls == () and reply.usage.cost is None


# --- Tokens and money ------------------------------------------------------------------


def test_it_sums_the_runs_tokens_and_cost_from_its_model_steps(drive, model_url):
    run, _ = start_run("support-bot", QUESTION, run_id="tokens-1")
    run = drive(run.id)
    usages = [result["usage"] for result in _llm_results(run.id)]
    assert run.tokens_in == sum(u["prompt_tokens"] for u in usages) > 0
    assert run.tokens_out == sum(u["completion_tokens"] for u in usages) == 14
    assert run.tokens_cached == sum(u["cached_tokens"] for u in usages) > 0
    # gpt-4o-mini (answered as gpt-4o-mini-2024-07-18): $0.15, $0.075 cached, $0.60 / M.
    expected = (
        sum(
            (u["prompt_tokens"] - u["cached_tokens"]) * Decimal("0.15")
            + u["cached_tokens"] * Decimal("0.075")
            + u["completion_tokens"] * Decimal("0.60")
            for u in usages
        )
        / 1_000_000
    )
    assert run.cost == expected
    assert sum(Decimal(u["cost"]) for u in usages) == expected


def test_an_unpriced_model_has_no_cost_rather_than_zero(drive, model_url, settings):
    settings.DURABLERUNS_MODEL_NAME = "my-local-llama"
    run, _ = start_run("support-bot", QUESTION, run_id="unpriced")
    run = drive(run.id)
    assert run.tokens_in > 0
    assert [result["usage"]["cost"] for result in _llm_results(run.id)] == [None, None]


@dr.agent("token-hungry", version="1", max_tokens=60)
def token_hungry(run: dr.Run, task: dict) -> None:
    for turn in range(10):
        run.llm(f"turn-{turn}", messages=[{"role": "user", "content": "one two three " * 5}])


@dr.agent("big-spender", version="1", max_cost="0.00002")
def big_spender(run: dr.Run, task: dict) -> None:
    for turn in range(10):
        run.llm(f"turn-{turn}", messages=[{"role": "user", "content": "one two three " * 5}])


@pytest.mark.parametrize(
    ("agent", "budget", "message"),
    [
        ("token-hungry", "tokens", "token budget exhausted: the run used"),
        ("big-spender", "cost", "cost budget exhausted: the run spent $"),
    ],
)
def test_a_token_or_cost_budget_stops_the_run(drive, agent, budget, message):
    run, _ = start_run(agent, {}, run_id=f"budget-{budget}")
    run = drive(run.id)
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "budget_exceeded" and run.error["budget"] == budget
    assert run.error["message"].startswith(message)
    # It stopped before the next model call once spent, not after ten.
    assert 1 < ModelCall.objects.count() < 10


def test_an_agent_refuses_a_budget_that_is_not_positive():
    with pytest.raises(dr.UsageError, match="max_cost must be a positive number"):
        dr.agent("bad-budget", max_cost="free")
    with pytest.raises(dr.UsageError, match="max_tokens must be a positive integer"):
        dr.agent("bad-budget", max_tokens=0)


# --- The README's example ----------------------------------------------------------------


def test_the_readme_shows_the_tested_tool_calling_agent():
    root = Path(__file__).resolve().parents[2]
    agent = (root / "tests" / "agents_toolcalling.py").read_text()
    code = re.search(r"# --- README: tool-calling agent ---\n(.*)# --- end ---", agent, re.S)
    assert code is not None
    assert f"```python\n{code.group(1).strip()}\n```" in (root / "README.md").read_text()
    # "A tool-calling agent in 30 lines" (issue 26): blank lines not counted.
    assert len([line for line in code.group(1).splitlines() if line.strip()]) <= 30


@dr.agent("tools-only-bot", version="1", max_steps=5)
def tools_only_bot(run: dr.Run, task: dict) -> dict:
    from tests.agents_toolcalling import TOOLS

    reply = run.llm("turn-0", messages=[{"role": "user", "content": task["question"]}], tools=TOOLS)
    run.sleep("nap", 0.05)  # what follows runs in a second pass, from the record
    return {
        "none": reply is None,
        "text": str(reply),
        "content": reply.content,
        "calls": [call.name for call in reply.tool_calls],
        "finish_reason": reply.finish_reason,
    }


def test_a_tools_only_reply_is_never_recorded_or_replayed_as_none(drive, model_url):
    run, _ = start_run("tools-only-bot", QUESTION, run_id="tools-only")
    run = drive(run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.leases_taken >= 2  # the reply below is the replayed one
    assert run.result == {
        "none": False,
        "text": "",
        "content": None,
        "calls": ["lookup_order", "refund", "send_email"],
        "finish_reason": "tool_calls",
    }
    recorded = _llm_results(run.id)[0]
    assert [call["name"] for call in recorded["tool_calls"]] == run.result["calls"]
    assert ModelCall.objects.filter(idempotency_key__startswith="tools-only:").count() == 1
