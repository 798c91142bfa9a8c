"""A tool ran but its result cannot be stored: the ledger never says it failed (invariant 16).

A write tool's side effect happened, so its effect becomes `unknown` and the run is
escalated with the step, the tool, the reason and the setting to change; a read-only
tool's step fails with a message that names the step, the tool and the fix.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

import durableruns as dr
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run, Step
from durableruns.services import escalations

pytestmark = pytest.mark.django_db(transaction=True)

SENT: Counter = Counter()
FIVE_MB = "x" * (5 * 1024 * 1024)


@pytest.fixture(autouse=True)
def _reset_sent():
    SENT.clear()


@dr.tool(kind=dr.UNSAFE_WRITE)
def send_receipt_at(to: str, *, idempotency_key: str) -> dict:
    SENT["send_receipt_at"] += 1
    return {"sent_at": datetime(2026, 1, 2, tzinfo=UTC)}  # a datetime: not JSON


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def export_report(name: str, *, idempotency_key: str) -> str:
    SENT["export_report"] += 1
    return FIVE_MB


@dr.tool(kind=dr.UNSAFE_WRITE)
def send_nul(to: str, *, idempotency_key: str) -> str:
    SENT["send_nul"] += 1
    return "sent\x00"


@dr.tool(kind=dr.READ_ONLY)
def fetch_timestamp(*, idempotency_key: str) -> object:
    return datetime(2026, 1, 2, tzinfo=UTC)


@dr.tool(kind=dr.READ_ONLY)
def fetch_page(*, idempotency_key: str) -> str:
    return FIVE_MB


@dr.agent("t-ledger-datetime", version="1")
def datetime_after_send(run: dr.Run, task: dict) -> object:
    sent = run.call(send_receipt_at, to="ann@example.com")
    return {"sent": sent}


@dr.agent("t-ledger-5mb", version="1")
def five_mb_export(run: dr.Run, task: dict) -> object:
    return len(run.call(export_report, name="q3"))


@dr.agent("t-ledger-nul", version="1")
def nul_after_send(run: dr.Run, task: dict) -> object:
    return run.call(send_nul, to="ann@example.com")


@dr.agent("t-ledger-read-datetime", version="1")
def read_datetime(run: dr.Run, task: dict) -> object:
    return run.call(fetch_timestamp)


@dr.agent("t-ledger-read-5mb", version="1")
def read_five_mb(run: dr.Run, task: dict) -> object:
    return len(run.call(fetch_page))


def _effect(run_id: str) -> Effect:
    return Effect.objects.get(run_id=run_id)


def test_a_datetime_after_an_unsafe_write_escalates_and_never_fails(drive):
    start_run("t-ledger-datetime", {}, run_id="ld")
    run = drive("ld")
    effect = _effect("ld")
    assert run.status == Run.Status.ESCALATED
    assert effect.state == Effect.State.UNKNOWN
    message = effect.error["message"]
    assert "step 0" in message and "send_receipt_at" in message
    assert "not JSON-serialisable" in message
    assert "the call happened" in message
    assert SENT["send_receipt_at"] == 1
    assert not Step.objects.filter(run_id="ld").exists()  # no failure recorded to replay


def test_resolving_it_continues_the_run_without_sending_again(drive, bob):
    start_run("t-ledger-datetime", {}, run_id="ld2")
    drive("ld2")
    escalations.resolve(
        _effect("ld2"), "happened", user=bob, result={"sent_at": "2026-01-02T00:00:00+00:00"}
    )
    run = drive("ld2")
    assert run.status == Run.Status.SUCCEEDED
    assert run.result == {"sent": {"sent_at": "2026-01-02T00:00:00+00:00"}}
    assert SENT["send_receipt_at"] == 1


def test_a_5mb_result_of_an_idempotent_write_escalates_naming_the_setting(drive):
    start_run("t-ledger-5mb", {}, run_id="l5")
    run = drive("l5")
    effect = _effect("l5")
    assert run.status == Run.Status.ESCALATED
    assert effect.state == Effect.State.UNKNOWN
    message = effect.error["message"]
    assert "step 0" in message and "export_report" in message
    assert "over the 1048576-byte limit" in message
    assert "DURABLERUNS_MAX_PAYLOAD_BYTES" in message
    assert run.last_error["message"] == message
    assert SENT["export_report"] == 1


def test_a_nul_in_an_unsafe_write_result_escalates(drive):
    start_run("t-ledger-nul", {}, run_id="ln")
    run = drive("ln")
    assert run.status == Run.Status.ESCALATED
    assert _effect("ln").state == Effect.State.UNKNOWN
    assert "NUL" in _effect("ln").error["message"]
    assert SENT["send_nul"] == 1


def test_a_read_only_tool_returning_a_datetime_fails_the_step_clearly(drive):
    start_run("t-ledger-read-datetime", {}, run_id="lr")
    run = drive("lr")
    assert run.status == Run.Status.FAILED
    message = run.error["message"]
    assert "step 0 (tool 'fetch_timestamp')" in message
    assert "not JSON-serialisable" in message
    assert "return only JSON values" in message
    assert Step.objects.get(run_id="lr").error["message"] == message


def test_a_read_only_tool_returning_5mb_fails_the_step_naming_the_setting(drive):
    start_run("t-ledger-read-5mb", {}, run_id="lr5")
    run = drive("lr5")
    assert run.status == Run.Status.FAILED
    message = run.error["message"]
    assert "step 0 (tool 'fetch_page')" in message
    assert "over the 1048576-byte limit" in message
    assert "DURABLERUNS_MAX_PAYLOAD_BYTES" in message
    assert Step.objects.get(run_id="lr5").error["message"] == message


@dr.tool(kind=dr.UNSAFE_WRITE)
def send_note(body: object, *, idempotency_key: str) -> str:
    SENT["send_note"] += 1
    return "sent"


@dr.agent("t-ledger-big-args", version="1")
def big_args(run: dr.Run, task: dict) -> object:
    return run.call(send_note, body="x" * 2000)


@dr.agent("t-ledger-datetime-args", version="1")
def datetime_args(run: dr.Run, task: dict) -> object:
    return run.call(send_note, body=datetime(2026, 1, 2, tzinfo=UTC))


def test_arguments_over_the_limit_name_the_step_the_tool_and_the_setting(drive, settings):
    settings.DURABLERUNS_MAX_PAYLOAD_BYTES = 1000
    start_run("t-ledger-big-args", {}, run_id="lba")
    run = drive("lba")
    assert run.status == Run.Status.FAILED
    message = run.error["message"]
    assert "step 0 (tool 'send_note')" in message
    assert "DURABLERUNS_MAX_PAYLOAD_BYTES" in message
    assert not Effect.objects.filter(run_id="lba").exists()
    assert SENT["send_note"] == 0


def test_arguments_that_are_not_json_name_the_step_and_the_tool(drive):
    start_run("t-ledger-datetime-args", {}, run_id="lda")
    run = drive("lda")
    assert run.status == Run.Status.FAILED
    assert (
        "step 0 (tool 'send_note'): the arguments are not JSON-serialisable"
        in (run.error["message"])
    )
    assert SENT["send_note"] == 0


@dr.agent("t-ledger-step-args", version="1")
def step_args(run: dr.Run, task: dict) -> object:
    return run.step("format", str, datetime(2026, 1, 2, tzinfo=UTC))


def test_step_arguments_that_are_not_json_name_the_step(drive):
    start_run("t-ledger-step-args", {}, run_id="lsa")
    run = drive("lsa")
    assert run.status == Run.Status.FAILED
    assert (
        "step 0 (compute 'format'): its arguments are not JSON-serialisable"
        in (run.error["message"])
    )
