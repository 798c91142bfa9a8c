"""LangGraph values are untrusted input: a stored or imported blob never names code
that runs (invariant 15). The forged blob asks for `os.system(command)`, where the
command creates a canary file: if anything decodes it with LangGraph's permissive
serializer, the file appears."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Annotated, TypedDict

import ormsgpack
import pytest
from django.core.management import CommandError, call_command
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.render import thread_view
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.serde import UnsafeValue, allowed_types, check
from durableruns.langgraph.store import run_id_for
from durableruns.langgraph.transfer import ImportRefused, export_thread, import_thread
from durableruns.models import Approval, AuditEvent, LangGraphBlob, LangGraphCheckpoint, Run
from durableruns.services import approvals as approval_service
from tests.langgraph.graphs import refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def _os_system(command: str) -> bytes:
    # LangGraph's msgpack extension 0: (module, name, argument), called on decode.
    return ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb(["os", "system", command])))


def _interrupted(thread_id: str) -> Run:
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "U-1"}, _config(thread_id))
    return Run.objects.get(pk=run_id_for(thread_id))


def _forged_export(run: Run, canary) -> dict:
    """The export with the latest `log` value replaced by the os.system blob."""
    doc = json.loads(json.dumps(export_thread(run)))
    log = max((b for b in doc["blobs"] if b["channel"] == "log"), key=lambda b: b["version"])
    log["type"] = "msgpack"
    log["blob"] = base64.b64encode(_os_system(f"touch {canary}")).decode()
    return doc


def test_an_imported_blob_naming_a_callable_is_refused(tmp_path):
    canary = tmp_path / "canary"
    doc = _forged_export(_interrupted("honest"), canary)

    with pytest.raises(ImportRefused, match=r"os\.system"):
        import_thread(doc, thread_id="forged")

    assert not Run.objects.filter(pk=run_id_for("forged")).exists()
    assert not canary.exists()


@pytest.mark.parametrize("kind", ["pickle", "no-such-type"])
def test_an_imported_blob_of_a_type_that_loads_code_is_refused(kind):
    doc = json.loads(json.dumps(export_thread(_interrupted("typed"))))
    doc["blobs"][0]["type"] = kind

    with pytest.raises(ImportRefused, match=kind):
        import_thread(doc, thread_id="typed-copy")

    assert not Run.objects.filter(pk=run_id_for("typed-copy")).exists()


def test_import_into_an_existing_thread_is_refused(tmp_path):
    run = _interrupted("victim")
    before = LangGraphCheckpoint.objects.filter(thread_id=run.pk).count()
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(export_thread(run)))

    with pytest.raises(CommandError, match="already exists"):
        call_command("langgraphthread", "import", str(path), "--thread-id", "victim")

    assert LangGraphCheckpoint.objects.filter(thread_id=run.pk).count() == before


def test_an_import_is_audited_with_who_and_the_file_digest(tmp_path, bob):
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(export_thread(_interrupted("audited"))))

    call_command("langgraphthread", "import", str(path), "--thread-id", "copy", "--user", "bob")

    event = AuditEvent.objects.get(action="langgraph.import")
    assert (event.actor_name, event.target_id) == ("bob", run_id_for("copy"))
    assert event.after["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_forged_blob_in_the_table_is_never_called_on_render_or_resume(tmp_path, settings, alice):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = ["refund=tests.langgraph.graphs:refund_graph"]
    canary = tmp_path / "canary"
    run = _interrupted("stored")
    LangGraphBlob.objects.filter(thread_id=run.pk, channel="log").update(
        type="msgpack", blob=_os_system(f"touch {canary}")
    )

    thread_view(run)
    approval_service.decide(Approval.objects.get(run_id=run.pk), "approve", user=alice)
    with pytest.raises(UnsafeValue, match=r"os\.system is not an allowed type"):
        resume_thread(run.pk)

    assert not canary.exists()


@dataclasses.dataclass
class Parcel:
    weight: int


class Shipping(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    parcel: Parcel


def _shipping_graph():
    builder = StateGraph(Shipping)
    builder.add_node("pack", lambda state: {"parcel": Parcel(3), "messages": [AIMessage("ok")]})
    builder.add_edge(START, "pack")
    builder.add_edge("pack", END)
    return builder.compile(checkpointer=DurableRunsSaver())


def test_messages_load_and_a_state_class_loads_once_it_is_allowed(settings):
    settings.DURABLERUNS_LANGGRAPH_ALLOWED_TYPES = [f"{__name__}.Parcel"]
    _shipping_graph().invoke({"messages": [HumanMessage("ship it")]}, _config("allowed"))

    values = _shipping_graph().get_state(_config("allowed")).values

    assert values["parcel"] == Parcel(3)
    assert [type(m) for m in values["messages"]] == [HumanMessage, AIMessage]
    settings.DURABLERUNS_LANGGRAPH_ALLOWED_TYPES = []
    with pytest.raises(UnsafeValue, match="Parcel is not an allowed type"):
        _shipping_graph().get_state(_config("allowed"))


def test_a_permissive_serializer_is_refused():
    with pytest.raises(TypeError, match="StrictSerializer"):
        DurableRunsSaver(serde=JsonPlusSerializer())


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        ([1, {"x": ormsgpack.Ext(0, ormsgpack.packb(["os", "system", "x"]))}], r"os\.system"),
        (ormsgpack.Ext(3, ormsgpack.packb(["os", "system", "x", "fromisoformat"])), "os.system"),
        (ormsgpack.Ext(9, b"\x00"), "not a"),
        ({"text": "Հայերեն \u01c0"}, None),  # marker bytes inside UTF-8 text, no extension
    ],
)
def test_the_check_finds_extensions_anywhere_and_passes_plain_text(value, refusal):
    data = ormsgpack.packb(value)
    if refusal is None:
        check("msgpack", data, allowed_types())
    else:
        with pytest.raises(UnsafeValue, match=refusal):
            check("msgpack", data, allowed_types())


def test_a_deep_value_is_refused_not_a_recursion_error():
    with pytest.raises(UnsafeValue, match="undecodable"):
        check("msgpack", b"\x91" * 100_000 + _os_system("x"), allowed_types())
