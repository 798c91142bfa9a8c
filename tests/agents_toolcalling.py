"""The README's tool-calling agent, verbatim below the marker (tests/engine/
test_tool_calling.py checks that the README shows exactly this code). Workers import
it through DURABLERUNS_AGENT_MODULES (`durableruns.demo.agents,tests.agents_toolcalling`).
The stand-in model (durableruns/demo/model.py) fills each tool's arguments from its
schema's defaults.
"""

# --- README: tool-calling agent ---
import durableruns as dr
from durableruns.demo.tools import lookup_order, refund, send_email


def schema(name: str, **params: dict) -> dict:
    properties = {"type": "object", "properties": params, "required": sorted(params)}
    return {"type": "function", "function": {"name": name, "parameters": properties}}


TOOLS = [
    schema("lookup_order", order_id={"type": "string", "default": "A-1001"}),
    schema(
        "refund",
        order_id={"type": "string", "default": "A-1001"},
        cents={"type": "integer", "default": 4500},
    ),
    schema(
        "send_email",
        to={"type": "string", "default": "ada@example.com"},
        subject={"type": "string", "default": "Refund"},
        body={"type": "string", "default": "Your order was refunded."},
    ),
]


@dr.agent("support-bot", version="1", max_steps=20, max_tokens=50_000, max_cost="0.10")
def support_bot(run: dr.Run, task: dict) -> str:
    messages = [{"role": "user", "content": task["question"]}]
    for turn in range(5):
        reply = run.llm(f"turn-{turn}", messages=messages, tools=TOOLS)
        if not reply.tool_calls:
            return reply.content or ""
        run.call_tools(reply, [lookup_order, refund, send_email], messages=messages)
    raise dr.PermanentError("no answer after 5 turns")


# --- end ---
