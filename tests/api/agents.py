"""A small agent for the API tests: two computations around one write tool, all in process."""

from __future__ import annotations

from collections import Counter

import durableruns as dr

NOTES: Counter = Counter()  # real executions of the write tool, by idempotency key


@dr.tool(kind=dr.IDEMPOTENT_WRITE)
def t_api_note(text: str, *, idempotency_key: str) -> dict:
    NOTES[idempotency_key] += 1
    return {"noted": text}


def _shout(text: str) -> str:
    return text.upper()


@dr.agent("t-api", version="1", max_steps=10)
def api_agent(run: dr.Run, task: dict) -> dict:
    first = run.step("shout", _shout, task.get("text", "hello"))
    note = run.call(t_api_note, text=first)
    last = run.step("finish", _shout, note["noted"] + "!")
    return {"said": last}


@dr.agent("t-api-gate", version="1", max_steps=10)
def gated_agent(run: dr.Run, task: dict) -> dict:
    decision = run.approval("send-it", summary="Send the note?", payload={"text": "hi"})
    if not decision.approved:
        return {"sent": False}
    run.call(t_api_note, text="approved")
    return {"sent": True}
