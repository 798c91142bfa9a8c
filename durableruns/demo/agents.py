"""Two demo agents, written against the public agent-author API only."""

from __future__ import annotations

import json
from datetime import timedelta

import durableruns as dr

from .tools import EMAIL_TOOLS, REFUND_TOOLS, lookup_order, search_articles

# Refunds above this need a reviewer's approval (order A-1002 is 25_000 cents).
APPROVAL_THRESHOLD_CENTS = 10_000


@dr.agent("refund-bot", version="1", max_steps=20, max_duration=timedelta(minutes=30))
def refund_bot(run: dr.Run, task: dict) -> dict:
    """Plan, look up the order, get approval for a large refund, refund it, email the
    customer, summarise. A reviewer may lower the amount (edit-and-approve) or reject.

    Input: {"order_id": "A-1001", "payments": "dedupe|lookup|none",
            "email": "dedupe|lookup|none", "fail_first": 0}
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
    receipt = run.call(
        refund_tool, order_id=order["id"], cents=cents, fail_first=int(task.get("fail_first", 0))
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
