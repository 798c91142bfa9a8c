"""Agents for the dashboard tests. `WRITES` counts real executions of the write tool
in this process; the e2e tests load this module in their worker processes too."""

from __future__ import annotations

from collections import Counter

import durableruns as dr

WRITES: Counter = Counter()


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
