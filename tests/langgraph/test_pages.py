"""LangGraph threads in the dashboard: listed as runs with a derived status, the
run page's node timeline, and state rendered without LangGraph's deserializer."""

from __future__ import annotations

import re
from pathlib import Path

import ormsgpack
import pytest
from langgraph.types import Command

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.render import value
from durableruns.langgraph.store import run_id_for
from durableruns.models import AuditEvent, LangGraphBlob, LangGraphCheckpoint, Run
from durableruns.web.views import _budget
from tests.langgraph.graphs import chain_builder, refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def _evil(path: Path, *, inline: bool = False) -> bytes:
    """What LangGraph's serializer would turn into os.system("touch <path>"): as a
    stored value, or (inline) as a checkpoint's small values."""
    call = ormsgpack.packb(["os", "system", f"touch {path}"])
    values = {"cents": ormsgpack.Ext(0, call)}
    return ormsgpack.packb({"channel_values": values} if inline else values)


def test_it_lists_a_thread_as_an_interrupted_langgraph_run(client, alice):
    refund_builder().compile(checkpointer=DurableRunsSaver()).invoke(
        {"order": "L-1"}, _config("listed")
    )
    client.force_login(alice)

    page = client.get("/").content.decode()

    assert run_id_for("listed") in page
    assert ">interrupted</span>" in page


def test_an_interrupted_thread_page_reads_plainly(client, alice):
    """A thread has no budgets, no native steps or effects, and has not finished while
    an interrupt waits: the page says none of those things, and lists its checkpoints."""
    refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund")).invoke(
        {"order": "R-1"}, _config("plain")
    )
    record = Run.objects.get(pk=run_id_for("plain"))
    client.force_login(alice)

    page = client.get(f"/runs/{record.pk}/").content.decode()

    assert record.agent_label == "refund"
    assert "<dt>Graph</dt><dd>refund</dd>" in page and "refund@" not in page
    assert "Step budget" not in page and "of 0 steps" not in page
    assert "<dt>Steps</dt><dd>3</dd>" in page
    assert "Time budget" not in page and "of 0 ms" not in page
    assert not re.search(r"-\d+(\.\d+)? (ms|s|min|h)\b", page)
    assert not _budget(record, [])["waiting_text"].startswith("-")
    assert record.ended_at is None and " · finished " not in page
    assert "Steps and timeline" not in page and "No steps yet." not in page
    assert "<h2>Effects</h2>" not in page and "No effects." not in page
    assert '<ul class="checkpoints' in page and '<ol class="checkpoints' not in page


def test_the_runs_list_and_its_poll_count_a_threads_checkpoints_as_steps(client, alice):
    chain_builder(3).compile(checkpointer=DurableRunsSaver()).invoke({"count": 0}, _config("steps"))
    run_id = run_id_for("steps")
    client.force_login(alice)

    listed = client.get("/").content.decode()
    polled = client.get(f"/runs-statuses/?run={run_id}").content.decode()

    # Input, three nodes, the end: five supersteps, though no checkpoint wrote the Run row.
    assert Run.objects.get(pk=run_id).steps_used == 0
    # A thread has no step budget (max_steps 0): its steps are shown bare.
    assert f'<span id="steps-{run_id}">5</span>' in listed
    assert f'<span id="steps-{run_id}" hx-swap-oob="true">5</span>' in polled


def test_the_run_page_shows_nodes_writes_state_and_fork_points(client, alice):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    graph.invoke({"order": "P-1"}, _config("paged"))
    before_ask = next(
        s for s in graph.get_state_history(_config("paged")) if s.next == ("ask_human",)
    ).config
    graph.update_state(before_ask, {"cents": 7})
    graph.update_state(before_ask, {"cents": 9})
    client.force_login(alice)

    page = client.get(f"/runs/{run_id_for('paged')}/").content.decode()

    assert "LangGraph thread" in page
    assert "<strong>lookup</strong>" in page
    assert "interrupt" in page
    assert "fork point: 2 branches" in page
    assert "&quot;cents&quot;: 9" in page and "&quot;cents&quot;: 7" in page
    assert "Dry replay" not in page and "Resume run" not in page


def test_a_hostile_thread_id_renders(client, alice):
    chain_builder(2).compile(checkpointer=DurableRunsSaver()).invoke(
        {"count": 0}, _config("<script>\ud800\x00")
    )
    client.force_login(alice)

    response = client.get(f"/runs/{run_id_for('<script>\ud800\x00')}/")

    assert response.status_code == 200
    assert "&lt;script&gt;\\ud800\\u0000" in response.content.decode()


def test_stored_state_never_constructs_a_class(client, alice, tmp_path):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    graph.invoke({"order": "E-1"}, _config("evil"))
    # A value is stored in the blob table, or (a small scalar) in its checkpoint.
    LangGraphBlob.objects.filter(thread_id=run_id_for("evil")).update(
        type="msgpack", blob=_evil(tmp_path / "pwned")
    )
    LangGraphCheckpoint.objects.filter(thread_id=run_id_for("evil")).update(
        type="msgpack",
        checkpoint=_evil(tmp_path / "pwned", inline=True),
    )
    client.force_login(alice)

    page = client.get(f"/runs/{run_id_for('evil')}/").content.decode()

    assert not (tmp_path / "pwned").exists()
    assert "os.system" in page


def test_render_refuses_pickle_and_bounds_what_it_shows():
    assert value("pickle", b"cos\nsystem\n(S'true'\ntR.") == "(23 bytes of pickle: not shown)"
    assert value("msgpack", b"\xc1") == "(1 bytes of msgpack: undecodable)"
    deep: object = "bottom"
    for _ in range(200):
        deep = [deep]
    shown = value("msgpack", ormsgpack.packb(deep))
    assert "(nested too deeply)" in str(shown)
    assert value("json", b'"\\ud800"') == "\\ud800"


def test_a_finished_thread_is_idle(client, alice):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    graph.invoke({"order": "I-1"}, _config("idle"))
    graph.invoke(Command(resume={"decision": "approve"}), _config("idle"))
    client.force_login(alice)

    page = client.get(f"/runs/{run_id_for('idle')}/").content.decode()

    assert 'id="run-status">idle</span>' in page


def test_an_operator_forks_a_thread_from_a_checkpoint(client, bob):
    graph = refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))
    graph.invoke({"order": "F-9", "cents": 5}, _config("to-fork"))
    before_ask = next(
        s for s in graph.get_state_history(_config("to-fork")) if s.next == ("ask_human",)
    )
    client.force_login(bob)

    response = client.post(
        f"/runs/{run_id_for('to-fork')}/langgraph-fork/",
        {"checkpoint_id": before_ask.config["configurable"]["checkpoint_id"]},
    )

    child = Run.objects.get(parent_id=run_id_for("to-fork"))
    assert response.status_code == 302 and response["Location"] == f"/runs/{child.id}/"
    fork = AuditEvent.objects.get(action="run.fork", target_id=run_id_for("to-fork"))
    assert (fork.actor_name, fork.after["child"]) == ("bob", child.id)
    thread = child.langgraph_thread.thread_id
    assert graph.get_state(_config(thread)).values["cents"] == 5
    assert graph.get_state(_config(thread)).next == ("ask_human",)
    final = graph.invoke(None, _config(thread))
    assert "__interrupt__" in final  # the fork asks its own reviewer


def test_a_reviewer_cannot_fork_and_a_bad_checkpoint_is_refused(client, alice, bob):
    refund_builder().compile(checkpointer=DurableRunsSaver()).invoke(
        {"order": "F-10"}, _config("no-fork")
    )
    url = f"/runs/{run_id_for('no-fork')}/langgraph-fork/"
    client.force_login(alice)
    assert client.post(url, {"checkpoint_id": "x"}).status_code == 403
    client.force_login(bob)

    response = client.post(url, {"checkpoint_id": "\x00" * 5000})

    assert response.status_code == 400  # the validation layer refuses NUL before the view
    assert Run.objects.filter(kind="langgraph").count() == 1


def test_a_live_thread_page_renders_again_after_a_checkpoint_that_keeps_its_status(client, alice):
    """A checkpoint that keeps the thread's status does not touch the run row: the live
    poll's version still sees it (web/live.py)."""
    graph = refund_builder().compile(checkpointer=DurableRunsSaver())
    graph.invoke({"order": "V-1"}, _config("versioned"))
    client.force_login(alice)
    url = f"/runs/{run_id_for('versioned')}/"
    Run.objects.filter(pk=run_id_for("versioned")).update(status=Run.Status.RUNNING)
    body = client.get(url).content.decode()
    version = body.split('"X-Live-Version": "')[1].split('"')[0]
    poll = {"HX-Request": "true", "X-Live-Version": version}
    assert client.get(url, headers=poll).status_code == 204
    status = Run.objects.get(pk=run_id_for("versioned")).status
    graph.update_state(_config("versioned"), {"cents": 11})
    assert Run.objects.get(pk=run_id_for("versioned")).status == status
    assert client.get(url, headers=poll).status_code == 200
