"""LangGraph values are untrusted input: a stored or imported blob never names code
that runs (invariant 15). The forged blob asks for `os.system(command)`, where the
command creates a canary file: if anything decodes it with LangGraph's permissive
serializer, the file appears."""

from __future__ import annotations

import base64
import hashlib
import json

import ormsgpack
import pytest
from django.core.management import CommandError, call_command

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.render import thread_view
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.serde import UnsafeValue
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
