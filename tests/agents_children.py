"""Agents for the child-run tests (engine/children.py): orchestrators ("boss-*") and the
children they start ("kid-*"). Workers load them with DURABLERUNS_AGENT_MODULES."""

from __future__ import annotations

from collections import Counter

import durableruns as dr
from durableruns.demo.agents import refund_bot, research_bot
from durableruns.demo.tools import send_email

MODULES = "durableruns.demo.agents,tests.agents_children"
CALLS: Counter = Counter()  # executions of the kids' steps, in this process


def _double(n: int) -> int:
    CALLS["double"] += 1
    return n * 2


@dr.agent("kid-double", version="1")
def kid_double(run: dr.Run, task: dict) -> dict:
    return {"doubled": run.step("double", _double, task["n"])}


@dr.agent("kid-fails", version="1")
def kid_fails(run: dr.Run, task: dict) -> dict:
    raise dr.PermanentError(f"no stock for {task.get('item', 'it')}")


@dr.agent("kid-asks", version="1")
def kid_asks(run: dr.Run, task: dict) -> dict:
    decision = run.approval("ship", summary=f"Ship the {task['item']}?", payload=task)
    return {"approved": decision.approved, "by": decision.decider}


@dr.agent("kid-mails", version="1")
def kid_mails(run: dr.Run, task: dict) -> dict:
    sent = run.call(send_email, to=task["to"], subject="Hello", body="From a child run")
    return {"message_id": sent["message_id"]}


@dr.agent("kid-naps", version="1")
def kid_naps(run: dr.Run, task: dict) -> dict:
    run.sleep("nap", task["seconds"])
    return {"napped": task["seconds"]}


@dr.agent("boss-one", version="1")
def boss_one(run: dr.Run, task: dict) -> dict:
    got = run.child(kid_double, {"n": task["n"]})
    return {"got": got, "after": run.step("after", lambda: "continued")}


@dr.agent("boss-strict", version="1")
def boss_strict(run: dr.Run, task: dict) -> dict:
    return run.child(task.get("kid", "kid-fails"), task.get("input", {"item": "mug"}))


@dr.agent("boss-catches", version="1")
def boss_catches(run: dr.Run, task: dict) -> dict:
    try:
        return {"got": run.child(task.get("kid", "kid-fails"), task.get("input", {"item": "mug"}))}
    except dr.ChildRunFailed as exc:
        return {"caught": type(exc).__name__, "message": str(exc)}


@dr.agent("boss-fanout", version="1")
def boss_fanout(run: dr.Run, task: dict) -> dict:
    results = run.children([(kid_double, {"n": n}) for n in task["ns"]])
    return {"results": [r["doubled"] for r in results]}


@dr.agent("boss-small", version="1", max_steps=2)
def boss_small(run: dr.Run, task: dict) -> dict:
    return {"results": run.children([(kid_double, {"n": n}) for n in task["ns"]])}


@dr.agent("boss-mixed", version="1")
def boss_mixed(run: dr.Run, task: dict) -> dict:
    specs = [(kid_double, {"n": 1}), (kid_fails, {"item": "bike"}), (kid_double, {"n": 3})]
    results = run.children(specs, return_exceptions=True)
    return {"results": [str(r) if isinstance(r, Exception) else r for r in results]}


@dr.agent("boss-nested", version="1")
def boss_nested(run: dr.Run, task: dict) -> dict:
    return {"inner": run.child(task.get("inner", "boss-one"), task.get("input", {"n": 5}))}


@dr.agent("boss-asks", version="1")
def boss_asks(run: dr.Run, task: dict) -> dict:
    shipped = run.child(kid_asks, {"item": task.get("item", "bike")})
    return {"shipped": shipped, "after": run.step("after", lambda: "continued")}


@dr.agent("boss-mails", version="1")
def boss_mails(run: dr.Run, task: dict) -> dict:
    sent = run.children([(kid_mails, {"to": to}) for to in task["to"]])
    return {"sent": [s["message_id"] for s in sent]}


@dr.agent("boss-naps", version="1")
def boss_naps(run: dr.Run, task: dict) -> dict:
    return {"child": run.child(kid_naps, {"seconds": task.get("seconds", 1)})}


# The README's orchestrator ("Child runs"), verbatim below the marker
# (tests/chaos/test_children.py checks that the README shows exactly this code).
# --- README: orchestrator ---
@dr.agent("support-desk", version="1")
def support_desk(run: dr.Run, task: dict) -> dict:
    # Both children start at once; the desk waits for both, holding no worker.
    research, refund = run.children(
        [
            (research_bot, {"topic": f"refunds for a {task['item']}"}),
            (refund_bot, {"order_id": task["order_id"]}),
        ]
    )
    return {"sources": research["sources"], "refunded": refund["refunded"]}


# --- end ---
