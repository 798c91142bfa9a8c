"""Bad input gets a clear error and changes nothing."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

import durableruns as dr
from durableruns.demo.models import ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run, Step

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_unknown_agent_is_refused_by_name(rung):
    with pytest.raises(dr.UnknownAgent, match=r"unknown agent 'nope'.*refund-bot"):
        start_run("nope", {})
    assert not Run.objects.exists()


def test_startrun_refuses_input_that_is_not_json(rung):
    with pytest.raises(CommandError, match="input is not valid JSON"):
        call_command("startrun", "refund-bot", "--input", "{order_id: 1}")
    assert not Run.objects.exists()


@pytest.mark.parametrize("text", ["[1, 2]", '"text"', "3"])
def test_startrun_refuses_input_that_is_not_an_object(rung, text):
    with pytest.raises(CommandError, match="must be a JSON object"):
        call_command("startrun", "refund-bot", "--input", text)
    assert not Run.objects.exists()


def test_an_oversized_input_is_refused(rung, settings):
    settings.DURABLERUNS_MAX_PAYLOAD_BYTES = 1000
    with pytest.raises(dr.SerializationError, match="over the 1000-byte limit"):
        start_run("refund-bot", {"order_id": "x" * 2000})
    assert not Run.objects.exists()


def test_a_bad_run_id_is_refused(rung):
    with pytest.raises(dr.UsageError, match="run id must be"):
        start_run("refund-bot", {}, run_id="../etc/passwd")
    assert not Run.objects.exists()


def test_a_step_result_that_is_not_json_fails_the_run_clearly(drive):
    start_run("t-not-json", {}, run_id="nj")
    run = drive("nj")
    assert run.status == Run.Status.FAILED
    assert run.error["type"] == "SerializationError"
    assert "step 0 (compute 'make-set')" in run.error["message"]
    assert "not JSON-serialisable" in run.error["message"]


def test_a_return_value_that_is_not_json_fails_the_run_clearly(drive):
    start_run("t-returns-set", {}, run_id="rs")
    run = drive("rs")
    assert run.status == Run.Status.FAILED
    assert "the agent's return value" in run.error["message"]


def test_a_tool_called_without_its_required_arguments_writes_nothing(drive, provider_url):
    start_run("t-bad-tool-call", {}, run_id="bt")
    run = drive("bt")
    assert run.status == Run.Status.FAILED
    assert "tool 'refund' called with bad arguments" in run.error["message"]
    assert "cents" in run.error["message"]
    assert not Step.objects.filter(run=run).exists()
    assert not Effect.objects.filter(run=run).exists()
    assert not ProviderCall.objects.exists()
