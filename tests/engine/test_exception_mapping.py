"""The documented exception mapping (README "Errors and retries"): retry-worthy standard
exceptions are retried with backoff, a timeout of an unsafe write goes to a person,
everything else is permanent and says how to make it retried."""

from __future__ import annotations

import socket
from collections import Counter

import httpx
import pytest
import requests
from django.urls import reverse

import durableruns as dr
from durableruns.engine.retry import AMBIGUOUS, PERMANENT, TRANSIENT, classify
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run

CALLS: Counter = Counter()


def _closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("not an error status")


def _failing(name: str, times: int, make_error) -> str:
    CALLS[name] += 1
    if CALLS[name] <= times:
        raise make_error()
    return name


def _refused_by_httpx() -> Exception:
    try:
        httpx.get(f"http://127.0.0.1:{_closed_port()}/", timeout=2)
    except httpx.ConnectError as exc:
        return exc
    raise AssertionError("the connection was not refused")


def _rate_limited_once() -> str:
    """A model client's status error (httpx's, as OpenAI-compatible clients raise it)."""
    return _failing("plan", 1, lambda: _status_error(429))


@dr.tool(kind=dr.READ_ONLY)
def refused_twice(*, idempotency_key: str) -> str:
    return _failing("refused_twice", 2, _refused_by_httpx)


@dr.tool(kind=dr.READ_ONLY)
def times_out_once(*, idempotency_key: str) -> str:
    return _failing("times_out_once", 1, lambda: TimeoutError("read timed out"))


@dr.tool(kind=dr.UNSAFE_WRITE)
def charge_times_out(*, idempotency_key: str) -> str:
    return _failing("charge_times_out", 1, lambda: TimeoutError("read timed out"))


@dr.tool(kind=dr.UNSAFE_WRITE)
def charge_refused(*, idempotency_key: str) -> str:
    return _failing("charge_refused", 1, lambda: ConnectionRefusedError(111, "refused"))


@dr.tool(kind=dr.READ_ONLY)
def bad_value(*, idempotency_key: str) -> str:
    return _failing("bad_value", 99, lambda: ValueError("order total is negative"))


@dr.agent("t-map-refused", version="1")
def refused_agent(run: dr.Run, task: dict) -> object:
    return run.call(refused_twice)


@dr.agent("t-map-timeout-read", version="1")
def timeout_read_agent(run: dr.Run, task: dict) -> object:
    return run.call(times_out_once)


@dr.agent("t-map-timeout-write", version="1")
def timeout_write_agent(run: dr.Run, task: dict) -> object:
    return run.call(charge_times_out)


@dr.agent("t-map-refused-write", version="1")
def refused_write_agent(run: dr.Run, task: dict) -> object:
    return run.call(charge_refused)


@dr.agent("t-map-rate-limited", version="1")
def rate_limited_agent(run: dr.Run, task: dict) -> object:
    return run.step("plan", _rate_limited_once)


@dr.agent("t-map-value-error", version="1")
def value_error_agent(run: dr.Run, task: dict) -> object:
    return run.call(bad_value)


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


@pytest.mark.parametrize(
    ("make_error", "expected"),
    [
        (lambda: ConnectionRefusedError(111, "refused"), TRANSIENT),
        (lambda: socket.gaierror(-2, "Name or service not known"), TRANSIENT),
        (_refused_by_httpx, TRANSIENT),
        (lambda: httpx.ConnectTimeout("connect"), TRANSIENT),
        (lambda: requests.ConnectTimeout("connect"), TRANSIENT),
        (lambda: _status_error(429), TRANSIENT),
        (lambda: _status_error(503), TRANSIENT),
        (lambda: TimeoutError("read"), AMBIGUOUS),
        (lambda: ConnectionResetError(104, "reset"), AMBIGUOUS),
        (lambda: httpx.ReadTimeout("read"), AMBIGUOUS),
        (lambda: httpx.RemoteProtocolError("eof"), AMBIGUOUS),
        (lambda: requests.ConnectionError("aborted"), AMBIGUOUS),
        (lambda: _status_error(500), AMBIGUOUS),
        (lambda: _status_error(404), PERMANENT),
        (lambda: ValueError("x"), PERMANENT),
        (lambda: KeyError("x"), PERMANENT),
        (lambda: FileNotFoundError("x"), PERMANENT),
    ],
)
def test_it_classifies_standard_exceptions(make_error, expected):
    assert classify(make_error()) == expected


@pytest.mark.django_db(transaction=True)
def test_a_refused_connection_is_retried_until_it_succeeds(drive):
    start_run("t-map-refused", {}, run_id="mr")
    run = drive("mr")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert CALLS["refused_twice"] == 3


@pytest.mark.django_db(transaction=True)
def test_a_timeout_of_a_read_is_retried(drive):
    start_run("t-map-timeout-read", {}, run_id="mtr")
    run = drive("mtr")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert CALLS["times_out_once"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_timeout_of_an_unsafe_write_is_escalated_not_retried(drive):
    start_run("t-map-timeout-write", {}, run_id="mtw")
    run = drive("mtw")
    assert run.status == Run.Status.ESCALATED
    assert Effect.objects.get(run=run).state == Effect.State.UNKNOWN
    assert CALLS["charge_times_out"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_refused_connection_of_an_unsafe_write_is_retried(drive):
    start_run("t-map-refused-write", {}, run_id="mrw")
    run = drive("mrw")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert CALLS["charge_refused"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_rate_limited_model_call_is_retried(drive):
    start_run("t-map-rate-limited", {}, run_id="mrl")
    run = drive("mrl")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert CALLS["plan"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_value_error_is_permanent_and_says_how_to_retry(drive, client, bob):
    start_run("t-map-value-error", {}, run_id="mv")
    run = drive("mv")
    assert run.status == Run.Status.FAILED
    assert CALLS["bad_value"] == 1
    message = run.error["message"]
    assert "permanent: ValueError: order total is negative" in message
    assert "raise dr.TransientError to retry" in message
    client.force_login(bob)
    page = client.get(reverse("run", args=["mv"])).content.decode()
    assert "permanent: ValueError: order total is negative" in page
