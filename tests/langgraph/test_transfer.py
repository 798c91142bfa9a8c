"""Export and import of a LangGraph thread."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from langgraph.types import Command

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.store import run_id_for
from durableruns.langgraph.transfer import ImportRefused, export_thread, import_thread
from durableruns.models import LangGraphCheckpoint, Run
from tests.langgraph.graphs import refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def test_an_exported_thread_imports_and_resumes_elsewhere(tmp_path, capsys):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    graph.invoke({"order": "X-1"}, _config("travels"))
    call_command("langgraphthread", "export", run_id_for("travels"))
    path = tmp_path / "thread.json"
    path.write_text(capsys.readouterr().out)

    call_command("langgraphthread", "import", str(path), "--thread-id", "arrived")
    with pytest.raises(CommandError, match="already exists"):
        call_command("langgraphthread", "import", str(path), "--thread-id", "arrived")

    assert graph.get_state(_config("arrived")).values == graph.get_state(_config("travels")).values
    count = LangGraphCheckpoint.objects.filter(thread_id=run_id_for("travels")).count()
    assert LangGraphCheckpoint.objects.filter(thread_id=run_id_for("arrived")).count() == count
    final = graph.invoke(Command(resume={"decision": "approve"}), _config("arrived"))
    assert final["log"] == ["lookup", "ask_human", "paid"]


@pytest.mark.parametrize(
    "doc",
    [
        None,
        {"format": "other"},
        {"format": "durableruns.langgraph.thread/1", "checkpoints": "x", "blobs": [], "writes": []},
        {
            "format": "durableruns.langgraph.thread/1",
            "checkpoints": [{}],
            "blobs": [],
            "writes": [],
        },
    ],
)
def test_a_bad_document_is_refused_and_stores_nothing(doc):
    with pytest.raises(ImportRefused):
        import_thread(doc, thread_id="bad")

    assert not Run.objects.filter(pk=run_id_for("bad")).exists()


def test_a_bad_row_rolls_back_the_whole_import():
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    graph.invoke({"order": "X-2"}, _config("source"))
    doc = export_thread(Run.objects.get(pk=run_id_for("source")))
    doc["writes"][0]["idx"] = "not a number"

    with pytest.raises(ImportRefused):
        import_thread(json.loads(json.dumps(doc)), thread_id="half")

    assert not Run.objects.filter(pk=run_id_for("half")).exists()


def test_the_command_says_what_is_wrong(tmp_path):
    path = tmp_path / "nope.json"
    path.write_text("{not json")

    with pytest.raises(CommandError):
        call_command("langgraphthread", "import", str(path))
