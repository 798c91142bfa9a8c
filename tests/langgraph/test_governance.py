"""Retention, redaction, cancel and metrics cover LangGraph threads."""

from __future__ import annotations

import pytest
from langgraph.types import Command

from durableruns.langgraph import DurableRunsSaver, ThreadClosed
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.metrics import DatabaseCollector
from durableruns.models import (
    LangGraphBlob,
    LangGraphCheckpoint,
    LangGraphThread,
    LangGraphWrite,
    RetentionPolicy,
    Run,
)
from durableruns.services import retention
from durableruns.services import runs as run_service
from tests.langgraph.graphs import refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def _finished_thread(thread_id: str, secret: str):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": secret}, _config(thread_id))
    graph.invoke(Command(resume={"decision": "approve"}), _config(thread_id))
    return graph


def _policy(action: str) -> RetentionPolicy:
    return RetentionPolicy.objects.create(
        name=action, statuses=["succeeded"], age_days=0, action=action
    )


def test_redaction_shreds_checkpoints_and_the_thread_refuses_to_resume(carol):
    graph = _finished_thread("shred-me", "order-with-SECRET-77")

    retention.apply(_policy("redact"), triggered_by="test")

    run_id = run_id_for("shred-me")
    for model in (LangGraphCheckpoint, LangGraphBlob, LangGraphWrite):
        assert not model.objects.filter(thread_id=run_id).exists()
    assert bytes(LangGraphThread.objects.get(pk=run_id).thread_id_bytes) == b""
    assert "SECRET" not in str(Run.objects.filter(pk=run_id).values().get())
    with pytest.raises(ThreadClosed, match="redacted"):
        graph.invoke({"order": "again"}, _config("shred-me"))
    assert resume_thread(run_id) == "redacted: a redacted thread refuses to resume"


def test_deletion_removes_every_checkpoint(carol):
    _finished_thread("delete-me", "x")

    retention.apply(_policy("delete"), triggered_by="test")

    assert not Run.objects.filter(pk=run_id_for("delete-me")).exists()
    assert LangGraphCheckpoint.objects.count() == LangGraphBlob.objects.count() == 0


def test_an_operator_cancel_fences_the_thread(bob):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "c"}, _config("fenced"))

    assert run_service.cancel(Run.objects.get(pk=run_id_for("fenced")), user=bob)

    with pytest.raises(ThreadClosed, match="cancelled"):
        graph.invoke(Command(resume={"decision": "approve"}), _config("fenced"))


def test_metrics_count_langgraph_steps():
    _finished_thread("counted", "m")

    families = {f.name: f for f in DatabaseCollector().collect()}

    run = Run.objects.get(pk=run_id_for("counted"))
    Run.fill_langgraph_activity([run])
    steps = run.steps_used
    root = LangGraphCheckpoint.objects.filter(thread_id=run_id_for("counted"), checkpoint_ns="")
    assert steps == root.count() >= 4  # input, lookup, ask_human, pay
    assert families["durableruns_langgraph_steps"].samples[0].value == steps
