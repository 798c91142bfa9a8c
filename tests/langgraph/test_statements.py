"""Round trips per saver call on Postgres: a checkpoint, a task's writes and a read
are one statement each (the ORM path took up to eleven and a transaction), and the
one-statement paths keep the fence and the thread's derived status."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Interrupt

from durableruns.langgraph import AsyncDurableRunsSaver, ThreadClosed, native, store
from durableruns.langgraph.resume import current_owner
from durableruns.langgraph.saver import on_db_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import LangGraphCheckpoint, LangGraphThread, LangGraphWrite, Run
from tests.langgraph.graphs import chain_builder

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement path"),
]


@pytest.fixture
def statements(monkeypatch) -> Iterator[list[str]]:
    """Every statement sent through psycopg (Django's cursors are psycopg cursors;
    the async saver's own connection uses psycopg's async cursors), once the saver
    thread's connection is open."""
    on_db_thread(lambda: connection.ensure_connection())  # on the saver thread
    sent: list[str] = []

    def counted(method: Any) -> Any:
        def wrapper(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return method(self, query, *args, **kwargs)

        return wrapper

    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        for name in ("execute", "executemany"):
            monkeypatch.setattr(cls, name, counted(getattr(cls, name)))
    yield sent


def _checkpoint(count: int) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"count": count, "branch:to:n1": None}
    checkpoint["channel_versions"] = {"count": str(count), "branch:to:n1": str(count)}
    return checkpoint


def _put(saver: Any, config: dict, count: int) -> dict:
    return asyncio.run(
        saver.aput(config, _checkpoint(count), {"source": "loop", "step": count}, {"count": count})
    )


def test_a_first_checkpoint_is_one_statement_and_creates_the_thread(statements):
    saver = AsyncDurableRunsSaver(graph="chain")
    thread = f"first-{uuid.uuid4()}"

    _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)

    assert len(statements) == 1
    run = _filled(thread)
    assert (run.kind, run.agent, run.status, run.steps_used) == ("langgraph", "chain", "running", 1)
    assert run.started_at is not None and run.finished_at is None
    assert (run.max_steps, run.lease_owner, run.fence, run.legal_hold, run.secrets) == (
        0,
        "",
        0,
        False,
        "",
    )
    assert run.input == {"thread_id": thread} and run.created_by is None
    assert LangGraphThread.objects.get(pk=run.pk).thread_id == thread


def test_checkpoints_writes_and_reads_are_one_statement_each(statements):
    saver = AsyncDurableRunsSaver()
    thread = f"steady-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    statements.clear()

    second = _put(saver, first, 2)
    asyncio.run(saver.aput_writes(second, [("count", 3)], "task-1"))
    asyncio.run(saver.aput_writes(second, [("__error__", ValueError("boom"))], "task-2"))
    found = asyncio.run(saver.aget_tuple({"configurable": {"thread_id": thread}}))
    listed = asyncio.run(_all(saver.alist({"configurable": {"thread_id": thread}})))

    assert len(statements) == 5, statements
    # Small values are kept in the checkpoint itself, as AsyncPostgresSaver keeps them.
    assert found.checkpoint["channel_values"] == {"count": 2, "branch:to:n1": None}
    assert [(t, c) for t, c, _ in found.pending_writes] == [
        ("task-1", "count"),
        ("task-2", "__error__"),
    ]
    assert [t.checkpoint["channel_values"]["count"] for t in listed] == [2, 1]
    run = _filled(thread)
    assert (run.status, run.steps_used) == ("failed", 2)


def test_a_twenty_node_graph_takes_one_statement_per_checkpoint_and_per_task(statements):
    graph = chain_builder(20).compile(checkpointer=AsyncDurableRunsSaver())

    asyncio.run(graph.ainvoke({"count": 0}, {"configurable": {"thread_id": "chain-20"}}))

    sent = len(statements)
    run_id = run_id_for("chain-20")
    checkpoints = LangGraphCheckpoint.objects.filter(thread_id=run_id).count()
    tasks = (
        LangGraphWrite.objects.filter(thread_id=run_id)
        .values("checkpoint_id", "task_id")
        .distinct()
        .count()
    )
    # One read, then one statement per checkpoint (22) and per task's writes (21):
    # the ORM path sent 117 statements in 22 transactions.
    assert (checkpoints, tasks) == (22, 21)
    assert sent == 1 + checkpoints + tasks
    assert Run.objects.get(pk=run_id).status == "succeeded"


def test_the_one_statement_checkpoint_is_fenced(statements):
    saver = AsyncDurableRunsSaver()
    thread = f"fenced-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    Run.objects.filter(pk=run_id_for(thread)).update(status=Run.Status.CANCELLED)

    with pytest.raises(ThreadClosed, match="cancelled"):
        _put(saver, first, 2)
    with pytest.raises(ThreadClosed, match="cancelled"):
        asyncio.run(saver.aput_writes(first, [("__error__", ValueError("x"))], "task-1"))

    stored = LangGraphCheckpoint.objects.filter(thread_id=run_id_for(thread))
    assert [c.checkpoint_id for c in stored] == [first["configurable"]["checkpoint_id"]]
    assert not LangGraphWrite.objects.filter(thread_id=run_id_for(thread)).exists()
    assert Run.objects.get(pk=run_id_for(thread)).status == "cancelled"


@pytest.mark.parametrize("count", [0, 1, 8, 9, 20])
def test_any_number_of_writes_and_blobs_is_one_statement(statements, count):
    saver = AsyncDurableRunsSaver()
    thread = f"rows-{count}-{uuid.uuid4()}"
    checkpoint = empty_checkpoint()
    values = {f"c{i}": [i, "x" * 300] for i in range(count)}  # not inlined: blob rows
    checkpoint["channel_values"] = {**values, "small": 1}
    checkpoint["channel_versions"] = {c: "1" for c in checkpoint["channel_values"]}
    config = asyncio.run(
        saver.aput(
            {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
            checkpoint,
            {"source": "loop", "step": 1},
            dict(checkpoint["channel_versions"]),
        )
    )
    writes = [(f"c{i}", i) for i in range(count)]
    asyncio.run(saver.aput_writes(config, writes, "task-1"))
    asyncio.run(saver.aput_writes(config, writes, "task-1"))  # re-sent: kept once
    statements.clear()

    found = asyncio.run(saver.aget_tuple(config))

    assert len(statements) == 1
    assert found.checkpoint["channel_values"] == {**values, "small": 1}
    assert [(c, v) for _, c, v in found.pending_writes] == writes


def _filled(thread: str) -> Run:
    run = Run.objects.get(pk=run_id_for(thread))
    Run.fill_langgraph_activity([run])
    return run


def _row_version(thread: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM durableruns_run WHERE id = %s", [run_id_for(thread)])
        return cursor.fetchone()[0]


def test_a_checkpoint_writes_the_run_row_only_when_the_status_changes():
    saver = AsyncDurableRunsSaver()
    thread = f"quiet-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    created = _row_version(thread)

    second = _put(saver, first, 2)
    third = _put(saver, second, 3)

    # Still running: the Run row is the one the first checkpoint created, while its
    # steps and last activity are read from the checkpoints.
    assert _row_version(thread) == created
    run = _filled(thread)
    assert (run.status, run.steps_used) == ("running", 3)
    newest = LangGraphCheckpoint.objects.filter(thread_id=run.pk).order_by("-created_at")[0]
    assert run.updated_at == newest.created_at
    # The thread's last checkpoint has nothing left to run: idle, which the Run records.
    done = _checkpoint(4)
    done["channel_values"].pop("branch:to:n1")
    asyncio.run(saver.aput(third, done, {"source": "loop", "step": 4}, {"count": 4}))
    run = _filled(thread)
    assert _row_version(thread) != created
    assert (run.status, run.steps_used, run.finished_at is not None) == ("succeeded", 4, True)


@pytest.mark.parametrize(
    ("writes", "status"),
    [
        ([("task-1", "__error__", ValueError("boom"))], "failed"),
        ([("task-1", "__interrupt__", (Interrupt(value="ok?", id="i-1"),))], "awaiting_approval"),
        (
            [
                ("task-1", "__interrupt__", (Interrupt(value="ok?", id="i-1"),)),
                ("task-1", "__resume__", "yes"),
            ],
            "running",
        ),
        ([("task-1", "count", 5)], "running"),
    ],
)
@pytest.mark.parametrize("worker", ["", "worker-1"], ids=["caller", "leased-worker"])
def test_writes_recorded_before_their_checkpoint_decide_its_status(writes, status, worker):
    # LangGraph saves a checkpoint in the background while its tasks run, so a task's
    # error or interrupt can be stored before the checkpoint it belongs to: in the
    # caller's process, or in a worker resuming the thread under its lease.
    saver = AsyncDurableRunsSaver()
    thread = f"early-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    if worker:
        Run.objects.filter(pk=run_id_for(thread)).update(
            lease_owner=worker, lease_expires_at=timezone.now() + timedelta(minutes=5)
        )
    later = _checkpoint(2)
    pending = {"configurable": {**first["configurable"], "checkpoint_id": later["id"]}}
    token = current_owner.set(worker)
    try:
        for task, channel, value in writes:
            asyncio.run(saver.aput_writes(pending, [(channel, value)], task))

        asyncio.run(saver.aput(first, later, {"source": "loop", "step": 2}, {"count": 2}))
    finally:
        current_owner.reset(token)

    assert Run.objects.get(pk=run_id_for(thread)).status == status


def test_a_checkpoint_that_keeps_the_status_sends_no_update_of_the_run(statements):
    saver = AsyncDurableRunsSaver()
    thread = f"lean-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    statements.clear()

    _put(saver, first, 2)

    assert len(statements) == 1 and f"UPDATE {Run._meta.db_table}" not in statements[0], statements


@pytest.mark.parametrize("moved_to", ["succeeded", "failed", "awaiting_approval"])
def test_a_status_moved_elsewhere_is_set_again_by_the_next_checkpoint(moved_to):
    # Another process (a resume, an idle checkpoint) moved the status since this one
    # last wrote: the checkpoint's statement finds out and puts it right.
    saver = AsyncDurableRunsSaver()
    thread = f"moved-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    Run.objects.filter(pk=run_id_for(thread)).update(status=moved_to)

    second = _put(saver, first, 2)
    assert Run.objects.get(pk=run_id_for(thread)).status == "running"
    Run.objects.filter(pk=run_id_for(thread)).update(status="cancelled")
    with pytest.raises(ThreadClosed):
        _put(saver, second, 3)
    assert Run.objects.get(pk=run_id_for(thread)).status == "cancelled"


def test_the_async_saver_prepares_its_statements():
    saver = AsyncDurableRunsSaver()
    thread = f"prepared-{uuid.uuid4()}"
    config = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)

    async def prepared() -> list[str]:
        for count in range(2, 4):
            nonlocal config
            config = await saver.aput(
                config, _checkpoint(count), {"source": "loop", "step": count}, {"count": count}
            )
        conn = native._local.slot.conn
        cursor = await conn.execute("SELECT statement FROM pg_prepared_statements")
        statements = [row[0] for row in await cursor.fetchall()]
        cursor = await conn.execute("SHOW enable_seqscan")
        return statements, (await cursor.fetchone())[0]

    statements, seqscan = asyncio.run(prepared())
    # Django connects with prepare_threshold=None, with which psycopg ignored prepare=True.
    assert any("INSERT INTO durableruns_langgraphcheckpoint" in s for s in statements)
    # A plan kept from when the tables were empty must not scan every Run later on.
    assert seqscan == "off"


async def _all(items: Any) -> list[Any]:
    return [item async for item in items]


def test_the_async_saver_reconnects_after_its_connection_is_killed():
    saver = AsyncDurableRunsSaver()
    thread = f"killed-{uuid.uuid4()}"

    async def scenario() -> tuple[type, dict]:
        first = await saver.aput(
            {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
            _checkpoint(1),
            {"source": "loop", "step": 1},
            {"count": 1},
        )
        pid = native._local.slot.conn.info.backend_pid
        await asyncio.to_thread(_terminate, pid)
        with pytest.raises((OperationalError, InterfaceError)) as refused:
            await saver.aput(first, _checkpoint(2), {"source": "loop", "step": 2}, {"count": 2})
        return refused.type, await saver.aput(
            first, _checkpoint(3), {"source": "loop", "step": 3}, {"count": 3}
        )

    _, third = asyncio.run(scenario())

    found = asyncio.run(saver.aget_tuple(third))
    assert found.checkpoint["channel_values"] == {"count": 3, "branch:to:n1": None}


async def _blocked_by(pid: int, params: dict[str, Any], timeout: float = 10.0) -> None:
    """Wait until some session waits for a lock that session `pid` holds."""
    async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as observer:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            cursor = await observer.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                [pid],
            )
            if (await cursor.fetchone())[0]:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"no session waited for a lock of session {pid}")
            await asyncio.sleep(0.01)


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_cancel_committing_while_a_checkpoint_waits_refuses_the_checkpoint():
    """The fence is a row lock, not an UPDATE: a checkpoint that finds the thread's Run
    locked by a cancel waits for it, then reads the cancelled row and refuses."""
    saver = AsyncDurableRunsSaver()
    thread = f"racing-{uuid.uuid4()}"
    first = _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)

    async def scenario() -> None:
        canceller = await psycopg.AsyncConnection.connect(**params)
        try:
            await canceller.execute(
                "UPDATE durableruns_run SET status = 'cancelled' WHERE id = %s",
                [run_id_for(thread)],
            )  # in a transaction, not committed yet
            waiting = asyncio.ensure_future(
                saver.aput(first, _checkpoint(2), {"source": "loop", "step": 2}, {"count": 2})
            )
            # The checkpoint's statement waits for the cancel's row lock.
            await _blocked_by(canceller.info.backend_pid, params)
            assert not waiting.done()
            await canceller.commit()
            with pytest.raises(ThreadClosed, match="cancelled"):
                await waiting
        finally:
            await canceller.close()

    asyncio.run(scenario())

    stored = LangGraphCheckpoint.objects.filter(thread_id=run_id_for(thread))
    assert [c.checkpoint_id for c in stored] == [first["configurable"]["checkpoint_id"]]


def test_deleting_a_thread_waits_for_a_checkpoint_being_stored_and_deletes_it_too():
    """Checkpoints have no database foreign key to their thread (the fence is their
    check): deleting the thread takes the fence's lock first, so a checkpoint stored
    meanwhile is not left behind without its thread."""
    saver = AsyncDurableRunsSaver()
    thread = f"doomed-{uuid.uuid4()}"
    run_id = run_id_for(thread)
    _put(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 1)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)

    def delete() -> None:
        try:
            store.delete_thread(thread)
        finally:
            connection.close()

    async def scenario() -> None:
        # A checkpoint's statement under way: the fence's lock taken, its row inserted.
        writer = await psycopg.AsyncConnection.connect(**params)
        try:
            await writer.execute("SELECT id FROM durableruns_run WHERE id = %s FOR SHARE", [run_id])
            await writer.execute(
                "INSERT INTO durableruns_langgraphcheckpoint (thread_id, checkpoint_ns, "
                "checkpoint_id, parent_checkpoint_id, type, metadata_type, channel_versions, "
                "next_nodes, source, lg_run_id, created_at) "
                "VALUES (%s, '', 'late', '', 'msgpack', 'msgpack', '{}', '[]', '', '', now())",
                [run_id],
            )
            deleting = asyncio.ensure_future(asyncio.to_thread(delete))
            await _blocked_by(writer.info.backend_pid, params)
            await writer.commit()
            await deleting
        finally:
            await writer.close()

    asyncio.run(scenario())

    assert not Run.objects.filter(pk=run_id).exists()
    assert not LangGraphCheckpoint.objects.filter(thread_id=run_id).exists()
