"""Agents for the dashboard tests. `WRITES` counts real executions of the write tool
in this process; the e2e tests load this module in their worker processes too."""

from __future__ import annotations

import time
from collections import Counter

import durableruns as dr

WRITES: Counter = Counter()
CHARGES: dict[str, dict] = {}  # a stand-in provider's records, by idempotency key


def _value(name: str) -> str:
    return name


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def record_note(text: str, *, idempotency_key: str) -> dict:
    WRITES[text] += 1
    return {"noted": text, "key": idempotency_key}


@dr.agent("t-ledger", version="1", max_steps=10)
def ledger_bot(run: dr.Run, task: dict) -> dict:
    """Prepare, write a note through the ledger, finish."""
    prepared = run.step("prepare", _value, "prepared")
    note = run.call(record_note, text=task.get("text", "hello"))
    finished = run.step("finish", _value, "finished")
    return {"prepared": prepared, "note": note.get("noted"), "finished": finished}


@dr.agent("t-ticking", version="1", max_steps=40)
def ticking_bot(run: dr.Run, task: dict) -> dict:
    """Ticks with durable naps between them, so a timeline visibly grows."""
    ticks = int(task.get("ticks", 4))
    for tick in range(ticks):
        run.step(f"tick-{tick}", _value, f"tick {tick}")
        if tick < ticks - 1:
            run.sleep(f"nap-{tick}", float(task.get("nap", 0.6)))
    return {"ticks": ticks}


def _slow_value(name: str, pause: float) -> str:
    time.sleep(pause)
    return name


@dr.agent("t-long", version="1", max_steps=250)
def long_bot(run: dr.Run, task: dict) -> dict:
    """Many short steps, so a run page keeps changing for a while."""
    steps = int(task.get("steps", 60))
    for position in range(steps):
        run.step(f"work-{position}", _slow_value, f"work {position}", float(task.get("pause", 0.2)))
    return {"steps": steps}


def _flaky(name: str) -> str:
    raise dr.TransientError(f"{name}: the provider timed out")


@dr.agent("t-always-flaky", version="1", max_steps=10)
def flaky_bot(run: dr.Run, task: dict) -> dict:
    """A step that keeps failing transiently, so the run sits in retry backoff."""
    run.step("prepare", _value, "prepared")
    return {"never": run.step("call-provider", _flaky, "charge")}


@dr.tool(dr.UNSAFE_WRITE, name="t-charge")
def charge(cents: int, *, idempotency_key: str) -> dict:
    CHARGES[idempotency_key] = {"charge_id": f"ch_{len(CHARGES) + 1}", "cents": cents}
    return CHARGES[idempotency_key]


@charge.reconcile
def find_charge(cents: int, *, idempotency_key: str) -> dict | None:
    return CHARGES.get(idempotency_key)


@dr.agent("t-ignorable", version="1", max_steps=10)
def ignorable_bot(run: dr.Run, task: dict) -> dict:
    """A request a reviewer may dismiss without deciding (ignore); pays only if approved."""
    decision = run.approval(
        "pay-bonus",
        summary="Pay the **bonus**?",
        payload={"cents": 500},
        allowed=("approve", "reject", "ignore"),
    )
    paid = run.step("pay", lambda: "paid") if decision.approved else "not paid"
    return {"decision": decision.decision, "paid": paid}


@dr.agent("t-ask", version="1", max_steps=10)
def asking_bot(run: dr.Run, task: dict) -> dict:
    """Asks a reviewer a question it may answer in words (respond) instead of deciding."""
    decision = run.approval(
        "ask-warehouse",
        summary=f"Which **warehouse** should ship order `{task.get('order', 'A-7')}`?",
        payload={"order_id": task.get("order", "A-7")},
        allowed=("approve", "reject", "respond"),
    )
    return {"decision": decision.decision, "answer": decision.comment}
