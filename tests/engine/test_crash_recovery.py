"""What a resumed run does with a write whose previous executor died mid-call (the
ledger row says `started`, nothing says whether the provider acted), in one process:
the crash is a BaseException out of the tool, which no `except Exception` catches, and
the dead owner's lease is taken over as the sweeper would (invariant 5)."""

from __future__ import annotations

from collections import Counter

import pytest

import durableruns as dr
from durableruns.engine import executor, liveness, store
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CALLS: Counter = Counter()
FOUND: dict[str, dict] = {}
KEYS: list[str] = []


class WorkerKilled(BaseException):
    """Stands in for SIGKILL after the provider acted, before the answer was recorded."""


def _charge(name: str, idempotency_key: str) -> dict:
    CALLS[name] += 1
    KEYS.append(idempotency_key)
    if CALLS[name] == 1:
        FOUND[idempotency_key] = {"charge_id": "ch_1"}
        raise WorkerKilled
    return {"charge_id": f"ch_{CALLS[name]}"}


@dr.tool(kind=dr.UNSAFE_WRITE)
def charge_unsafe(*, idempotency_key: str) -> dict:
    return _charge("unsafe", idempotency_key)


@dr.tool(kind=dr.UNSAFE_WRITE)
def charge_with_lookup(*, idempotency_key: str) -> dict:
    return _charge("lookup", idempotency_key)


@charge_with_lookup.reconcile
def find_charge(*, idempotency_key: str) -> dict | None:
    return FOUND.get(idempotency_key)


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def charge_deduplicated(*, idempotency_key: str) -> dict:
    return _charge("idempotent", idempotency_key)


TOOLS = {"unsafe": charge_unsafe, "lookup": charge_with_lookup, "idempotent": charge_deduplicated}


@dr.agent("t-crash-mid-write", version="1")
def crash_mid_write(run: dr.Run, task: dict) -> object:
    return run.call(TOOLS[task["tool"]])


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()
    FOUND.clear()
    KEYS.clear()


def _crash_mid_call(run_id: str, tool: str) -> None:
    start_run("t-crash-mid-write", {"tool": tool}, run_id=run_id)
    with pytest.raises(WorkerKilled):
        executor.advance(run_id)
    assert Effect.objects.get(run_id=run_id).state == Effect.State.STARTED
    liveness.close()  # the process's death ends its liveness session, and frees its lock
    assert wait_for(store.take_over_dead_owners, timeout=5) == [run_id]


def test_it_never_calls_an_unsafe_write_again_and_escalates(drive):
    _crash_mid_call("unsafe", "unsafe")
    run = drive("unsafe")
    assert CALLS["unsafe"] == 1, "the unsafe write was sent twice"
    assert run.status == Run.Status.ESCALATED
    effect = Effect.objects.get(run_id="unsafe")
    assert effect.state == Effect.State.UNKNOWN
    assert "never recorded" in effect.error["message"]


def test_it_takes_a_reconciled_unsafe_writes_result_without_calling_it_again(drive):
    _crash_mid_call("lookup", "lookup")
    run = drive("lookup")
    assert CALLS["lookup"] == 1
    assert (run.status, run.result) == (Run.Status.SUCCEEDED, {"charge_id": "ch_1"})


def test_it_calls_an_idempotent_write_again_with_the_same_key(drive):
    _crash_mid_call("idempotent", "idempotent")
    run = drive("idempotent")
    assert CALLS["idempotent"] == 2
    key = Effect.objects.get(run_id="idempotent").idempotency_key
    assert set(KEYS) == {key}, "called again with another key"
    assert (run.status, run.result) == (Run.Status.SUCCEEDED, {"charge_id": "ch_2"})
