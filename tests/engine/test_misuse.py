"""Misuse of the agent API is refused where it happens, not later on replay."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import durableruns as dr
from durableruns.engine.runs import start_run
from durableruns.models import Run, Step

LOOKED_UP: Counter = Counter()


@dr.tool(kind=dr.READ_ONLY)
def look_up(order_id: str, *, idempotency_key: str) -> str:
    LOOKED_UP[order_id] += 1
    return order_id


@dr.agent("t-misuse-pool", version="1")
def from_a_pool(run: dr.Run, task: dict) -> object:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda o: run.call(look_up, order_id=o), ["A", "B"]))


@dr.agent("t-misuse-thread", version="1")
def from_a_thread(run: dr.Run, task: dict) -> object:
    def lookup() -> None:
        # Agent code that hides the error: the run must stop all the same.
        with contextlib.suppress(BaseException):
            run.call(look_up, order_id="C")

    worker = threading.Thread(target=lookup, name="side-thread")
    worker.start()
    worker.join()
    return "done"


@pytest.mark.django_db(transaction=True)
def test_a_run_call_from_a_thread_pool_stops_the_run_and_records_nothing(drive):
    LOOKED_UP.clear()
    start_run("t-misuse-pool", {}, run_id="mp")
    run = drive("mp")
    assert run.status == Run.Status.FAILED
    assert run.error["code"] == "wrong_thread"
    assert "not the thread running the agent" in run.error["message"]
    assert "parallel-steps API" in run.error["message"]
    assert not Step.objects.filter(run=run).exists()
    assert not LOOKED_UP


@pytest.mark.django_db(transaction=True)
def test_a_swallowed_wrong_thread_error_still_stops_the_run(drive):
    LOOKED_UP.clear()
    start_run("t-misuse-thread", {}, run_id="mt")
    run = drive("mt")
    assert run.status == Run.Status.FAILED
    assert "'side-thread'" in run.error["message"]
    assert not LOOKED_UP


def test_an_async_tool_is_refused_at_definition():
    with pytest.raises(dr.UsageError, match=r"tool 'fetch_async' is an async def.*plain def"):

        @dr.tool(kind=dr.READ_ONLY)
        async def fetch_async(*, idempotency_key: str) -> str:
            return "never"


def test_an_async_agent_is_refused_at_definition():
    with pytest.raises(dr.UsageError, match=r"agent 't-async' is an async def"):

        @dr.agent("t-async", version="1")
        async def agent(run: dr.Run, task: dict) -> None:
            return None


@dr.agent("t-misuse-async-step", version="1")
def async_step(run: dr.Run, task: dict) -> object:
    async def compute() -> int:
        return 1

    return run.step("compute", compute)


@pytest.mark.django_db(transaction=True)
def test_an_async_step_function_is_refused_before_anything_is_recorded(drive):
    start_run("t-misuse-async-step", {}, run_id="ma")
    run = drive("ma")
    assert run.status == Run.Status.FAILED
    assert "step 'compute''s function is an async def" in run.error["message"]
    assert not Step.objects.filter(run=run).exists()
