"""The demo agents, written against the public agent-author API only: some work
alone, one runs a model reply's tool calls at once, and an orchestrator runs one of
them as child runs; one asks a question a reviewer answers in words."""

from __future__ import annotations

import json
from datetime import timedelta

import durableruns as dr

from .tools import EMAIL_TOOLS, REFUND_TOOLS, lookup_order, search_articles, send_email

# Refunds above this need a reviewer's approval (order A-1002 is 25_000 cents).
APPROVAL_THRESHOLD_CENTS = 10_000


@dr.agent("refund-bot", version="1", max_steps=20, max_duration=timedelta(minutes=30))
def refund_bot(run: dr.Run, task: dict) -> dict:
    """Plan, look up the order, get approval for a large refund, refund it, email the
    customer, summarise. A reviewer may lower the amount (edit-and-approve) or reject.

    Input: {"order_id": "A-1001", "payments": "dedupe|lookup|none",
            "email": "dedupe|lookup|none", "fail_first": 0, "lose_answer": false}
    """
    plan = json.loads(
        run.llm(
            "plan",
            messages=[
                {"role": "system", "content": "You handle refund requests."},
                {"role": "user", "content": f"Refund order {task['order_id']}"},
            ],
        )
    )
    order = run.call(lookup_order, order_id=task["order_id"])
    refund_tool = REFUND_TOOLS[task.get("payments", "dedupe")]
    cents = order["cents"]
    if cents > APPROVAL_THRESHOLD_CENTS:
        decision = _approve_refund(run, order, refund_tool.name)
        if not decision.approved:
            return {
                "refunded": False,
                "reason": decision.comment or decision.decision,
                "decided_by": decision.decider,
            }
        cents = decision.payload["cents"]
    # lose_answer (payments "none" only): the demo's escalation, an unsafe refund whose
    # outcome nobody knows. Passed only when set, so older runs replay unchanged.
    lost = {"lose_answer": True} if task.get("lose_answer") else {}
    receipt = run.call(
        refund_tool,
        order_id=order["id"],
        cents=cents,
        fail_first=int(task.get("fail_first", 0)),
        **lost,
    )
    email_tool = EMAIL_TOOLS[task.get("email", "dedupe")]
    run.call(
        email_tool,
        to=order["customer"],
        subject=f"Refund for {order['id']}",
        body=f"We refunded {cents / 100:.2f} ({receipt['refund_id']}).",
    )
    summary = run.llm(
        "summary",
        messages=[
            {"role": "user", "content": f"Refund {receipt['refund_id']} of {cents} cents"},
        ],
    )
    return {
        "refunded": True,
        "refund_id": receipt["refund_id"],
        "cents": cents,
        "actions": plan["actions"],
        "summary": summary,
    }


def _approve_refund(run: dr.Run, order: dict, tool_name: str):
    """Ask a reviewer; they may lower the amount, never raise it or change the order."""
    schema = {
        "type": "object",
        "properties": {
            "order_id": {"const": order["id"]},
            "cents": {
                "type": "integer",
                "minimum": 1,
                "maximum": order["cents"],
                "title": "Amount (cents)",
                "description": "What to refund, in cents; lower it for a partial refund.",
                "x-display": "cents",
            },
        },
        "required": ["order_id", "cents"],
    }
    return run.approval(
        "approve-refund",
        summary=(
            f"Refund {order['cents'] / 100:.2f} for order {order['id']} "
            f"({order['item']}) to {order['customer']}"
        ),
        payload={
            "order_id": order["id"],
            "cents": order["cents"],
            "customer": order["customer"],
            "item": order["item"],
        },
        guards={
            "tool": tool_name,
            "args": {"order_id": order["id"], "cents": order["cents"]},
            "then": f"email {order['customer']} that the refund was made",
        },
        schema=schema,
        expires_in=timedelta(days=1),
        on_expiry="reject",
    )


@dr.agent("replacement-bot", version="1", max_steps=10, max_duration=timedelta(minutes=30))
def replacement_bot(run: dr.Run, task: dict) -> dict:
    """Ask a reviewer a question they answer in words (the "respond" decision), then act
    on the answer: which warehouse ships a replacement. Rejecting means no replacement.

    Input: {"order_id": "A-1001"}
    """
    order = run.call(lookup_order, order_id=task["order_id"])
    decision = run.approval(
        "ask-warehouse",
        summary=(
            f"Order **{order['id']}** ({order['item']}) arrived broken. Which warehouse "
            "should ship the replacement? Answer in words, or reject to send none."
        ),
        payload={"order_id": order["id"], "item": order["item"], "customer": order["customer"]},
        allowed=("respond", "reject"),
        expires_in=timedelta(days=1),
        on_expiry="reject",
    )
    if not decision.responded:
        return {"replaced": False, "reason": decision.comment or decision.decision}
    run.call(
        send_email,
        to=order["customer"],
        subject=f"Replacement for {order['id']}",
        body=f"Your replacement {order['item']} ships from {decision.comment}.",
    )
    return {"replaced": True, "ships_from": decision.comment, "answered_by": decision.decider}


@dr.agent("research-bot", version="1", max_steps=30, max_duration=timedelta(minutes=30))
def research_bot(run: dr.Run, task: dict) -> dict:
    """Plan queries, search, rank, draft, critique, finalise, and email the report.

    Input: {"topic": "durable agents", "email": "dedupe|lookup|none", "to": "..."}
    """
    topic = task.get("topic", "durable execution")
    plan = json.loads(run.llm("plan", messages=[{"role": "user", "content": topic}]))
    hits: dict[str, dict] = {}
    for query in plan["queries"]:
        for hit in run.call(search_articles, query=query)["hits"]:
            hits[hit["id"]] = hit
    ranked = run.step("rank", _rank, list(hits.values()))
    titles = "; ".join(a["title"] for a in ranked)
    draft = run.llm("draft", messages=[{"role": "user", "content": titles}])
    critique = run.llm("critique", messages=[{"role": "user", "content": draft}])
    final = run.llm("final", messages=[{"role": "user", "content": f"{draft}\n{critique}"}])
    email_tool = EMAIL_TOOLS[task.get("email", "dedupe")]
    sent = run.call(
        email_tool, to=task.get("to", "team@example.com"), subject=f"Research: {topic}", body=final
    )
    return {"report": final, "sources": [a["id"] for a in ranked], "message_id": sent["message_id"]}


def _rank(articles: list[dict]) -> list[dict]:
    return sorted(articles, key=lambda a: (-a["words"], a["id"]))


@dr.agent("refund-desk", version="1", max_steps=10, max_duration=timedelta(minutes=30))
def refund_desk(run: dr.Run, task: dict) -> dict:
    """Refund several orders at once: one refund-bot child run per order, all started
    together; the desk waits for every one (holding no worker) and tallies them. A large
    refund's approval shows this run in the reviewer's inbox card.

    Input: {"order_ids": ["A-1001", "A-1002"]}
    """
    order_ids = task.get("order_ids", ["A-1001", "A-1002"])
    outcomes = run.children(
        [(refund_bot, {"order_id": order_id}) for order_id in order_ids],
        return_exceptions=True,  # one failed refund must not hide the others
    )
    return run.step("tally", _tally, order_ids, [_outcome(o) for o in outcomes])


def _outcome(outcome: object) -> dict:
    if isinstance(outcome, dr.ChildRunFailed):
        return {"refunded": False, "reason": str(outcome)}
    return outcome  # type: ignore[return-value]


def _tally(order_ids: list[str], outcomes: list[dict]) -> dict:
    refunded = [o for o, r in zip(order_ids, outcomes, strict=True) if r.get("refunded")]
    cents = sum(r.get("cents", 0) for r in outcomes if r.get("refunded"))
    return {"refunded": refunded, "cents": cents, "outcomes": outcomes}


def _function(name: str, **params: dict) -> dict:
    """A tool's schema for the model; the scripted model calls it with the defaults."""
    properties = {"type": "object", "properties": params, "required": sorted(params)}
    return {"type": "function", "function": {"name": name, "parameters": properties}}


TRIAGE_TOOLS = [
    _function("lookup_order", order_id={"type": "string", "default": "A-1001"}),
    _function("search_articles", query={"type": "string", "default": "late refund"}),
    _function(
        "send_email",
        to={"type": "string", "default": "ada@example.com"},
        subject={"type": "string", "default": "We are on it"},
        body={"type": "string", "default": "We are looking into your refund."},
    ),
]


@dr.agent("triage-bot", version="1", max_steps=10, max_duration=timedelta(minutes=10))
def triage_bot(run: dr.Run, task: dict) -> str:
    """One model reply with three tool calls (look the order up, search the help
    articles, acknowledge by email), executed concurrently by run.call_tools; the run
    page shows the three branches as overlapping bars.

    Input: {"question": "..."}
    """
    messages = [{"role": "user", "content": task.get("question", "Where is my refund?")}]
    reply = run.llm("triage", messages=messages, tools=TRIAGE_TOOLS)
    run.call_tools(reply, [lookup_order, search_articles, send_email], messages=messages)
    return run.llm("answer", messages=messages, tools=TRIAGE_TOOLS).content or ""
