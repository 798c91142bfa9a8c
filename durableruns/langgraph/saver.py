"""LangGraph checkpointers that store into durableruns (Django-managed tables)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import InterfaceError, OperationalError, connection, connections
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ERROR,
    INTERRUPT,
    RESUME,
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from durableruns.engine import crashpoints
from durableruns.langgraph import crashes, native, store
from durableruns.langgraph.interrupts import approval_specs
from durableruns.langgraph.resume import current_owner
from durableruns.langgraph.serde import StrictSerializer, require_strict

BRANCH_PREFIX = "branch:to:"

# Every saver call in the process runs on this one thread, on its one Django
# connection. LangGraph calls put and put_writes concurrently from its background
# threads (and aput/aput_writes concurrently on the event loop); a connection per
# calling thread would leak one per invocation until garbage collection.
_db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="durableruns-langgraph")


def _fresh(method: Any, *args: Any, **kwargs: Any) -> Any:
    # Not close_if_unusable_or_obsolete(): with CONN_MAX_AGE=0 (Django's default) it
    # reconnects on every call (about 20 ms). A broken connection is closed instead,
    # and the next call opens a new one.
    try:
        return method(*args, **kwargs)
    except (OperationalError, InterfaceError):
        connection.close()
        raise


def on_db_thread(method: Any, *args: Any, **kwargs: Any) -> Any:
    return _db_thread.submit(_fresh, method, *args, **kwargs).result()


async def on_db_thread_async(method: Any, *args: Any, **kwargs: Any) -> Any:
    return await asyncio.wrap_future(_db_thread.submit(_fresh, method, *args, **kwargs))


def close_connection() -> None:
    """Close the saver thread's database connection and the async saver's (tests,
    before dropping a database)."""
    on_db_thread(connections.close_all)
    native.close_all()


class DurableRunsSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose threads are durableruns runs.

    `graph` names the compiled graph in DURABLERUNS_LANGGRAPH_GRAPHS, so that a
    reviewer's decision can resume an interrupted thread from a worker."""

    def __init__(self, *, graph: str = "", serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=require_strict(serde or StrictSerializer()))
        self.graph = graph

    # --- reads -------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return on_db_thread(self._get_tuple, config)

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        records = store.fetch(
            conf["thread_id"], conf.get("checkpoint_ns", ""), get_checkpoint_id(config), limit=1
        )
        return self._tuple(records[0]) if records else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from on_db_thread(self._list, config, filter=filter, before=before, limit=limit)

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> list[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        records = store.fetch(
            conf.get("thread_id"),
            conf.get("checkpoint_ns"),
            get_checkpoint_id(config) if config else None,
            get_checkpoint_id(before) if before else None,
            # A metadata filter is applied here, so the query cannot stop early.
            limit=None if filter or limit is None else max(limit, 0),
        )
        found = []
        for record in records:
            if limit is not None and len(found) >= limit:
                break
            metadata = self.serde.loads_typed((record[6], bytes(record[7])))
            if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                continue
            found.append(self._tuple(record, metadata))
        return found

    def _tuple(self, record: tuple[Any, ...], metadata: Any = None) -> CheckpointTuple:
        thread, ns, checkpoint_id, parent_id, ctype, cdata, mtype, mdata, blobs, writes = record
        thread_id = bytes(thread).decode("utf-8", "surrogatepass")
        checkpoint = self.serde.loads_typed((ctype, bytes(cdata)))
        values = {
            channel: self.serde.loads_typed((kind, bytes(blob))) for channel, kind, blob in blobs
        }
        pending = [
            (task_id, channel, self.serde.loads_typed((kind, bytes(blob))))
            for task_id, channel, kind, blob in writes
        ]
        if metadata is None:
            metadata = self.serde.loads_typed((mtype, bytes(mdata)))

        def config_of(checkpoint_id: str) -> RunnableConfig:
            return {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            }

        return CheckpointTuple(
            config=config_of(checkpoint_id),
            # Checkpoints stored before values were inlined have no channel_values.
            checkpoint={
                **checkpoint,
                "channel_values": {**checkpoint.get("channel_values", {}), **values},
            },
            metadata=metadata,
            parent_config=config_of(parent_id) if parent_id else None,
            pending_writes=pending,
        )

    # --- writes ------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved, args = self._checkpoint_rows(config, checkpoint, metadata, new_versions)
        crashes.checkpoint_made(args[0], args[1], args[2])
        on_db_thread(store.put_checkpoint, *args, graph=self.graph, owner=current_owner.get())
        crashes.checkpoint_stored(args[0], args[1], args[2])
        return saved

    def _checkpoint_rows(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[RunnableConfig, tuple[Any, ...]]:
        """Serialize on the calling thread; only the SQL runs on the saver thread."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        saved = checkpoint.copy()
        values: dict[str, Any] = checkpoint["channel_values"]
        # Small scalars (a counter, a flag, a trigger's None) stay in the checkpoint row,
        # as in AsyncPostgresSaver: a row in the blob table each would double the cost
        # of a checkpoint. A channel with a new version and no value needs no row either
        # (the versions are unique: a missing blob reads as an empty channel).
        inline = {c: v for c, v in values.items() if _inline(v)}
        saved["channel_values"] = inline
        blobs = [
            (channel, str(version), *self.serde.dumps_typed(values[channel]))
            for channel, version in new_versions.items()
            if channel in values and channel not in inline
        ]
        metadata = get_checkpoint_metadata(config, metadata)
        ctype, cdata = self.serde.dumps_typed(saved)
        mtype, mdata = self.serde.dumps_typed(metadata)
        step = metadata.get("step")
        row = {
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": conf.get("checkpoint_id") or "",
            "type": ctype,
            "checkpoint": cdata,
            "metadata_type": mtype,
            "metadata": mdata,
            "channel_versions": {c: str(v) for c, v in checkpoint["channel_versions"].items()},
            "next_nodes": _next_nodes(values),
            "step": step if isinstance(step, int) and abs(step) < 2**31 else None,
            "source": str(metadata.get("source") or "")[:50],
            "lg_run_id": str(metadata.get("run_id") or ""),
        }
        saved_config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        return saved_config, (thread_id, ns, row, blobs)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        approvals = on_db_thread(self._approvals, writes, task_path) if _asks(writes) else []
        rows = self._write_rows(config, writes, task_id, task_path, approvals)
        crashes.task_writes(crashpoints.AFTER_TOOL_RETURNED, *rows[:4])
        on_db_thread(store.put_writes, *rows, owner=current_owner.get(), graph=self.graph)
        crashes.task_writes(crashpoints.AFTER_STEP_COMMIT, *rows[:4])

    def _write_rows(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        approvals: list[dict[str, Any]],
    ) -> tuple[Any, ...]:
        conf = config["configurable"]
        # A special write (resume, interrupt, error: one idx per channel) sent twice in
        # one call keeps the last, as LangGraph's own savers do: a node that calls
        # interrupt() twice sends RESUME [a] and then RESUME [a, b]. One statement
        # cannot insert a row twice.
        by_idx: dict[int, dict[str, Any]] = {}
        for idx, (channel, value) in enumerate(writes):
            kind, data = self.serde.dumps_typed(value)
            slot = WRITES_IDX_MAP.get(channel, idx)
            by_idx.pop(slot, None)
            by_idx[slot] = {
                "task_id": task_id,
                "task_path": task_path,
                "idx": slot,
                "channel": channel,
                "type": kind,
                "blob": data,
            }
        rows = list(by_idx.values())
        return (
            conf["thread_id"],
            conf.get("checkpoint_ns", ""),
            conf["checkpoint_id"],
            rows,
            _status_after(w[0] for w in writes),
            approvals,
        )

    def _approvals(self, writes: Sequence[tuple[str, Any]], task_path: str) -> list[dict[str, Any]]:
        """The approvals a task's interrupts open. Run on the saver thread: their payloads
        are redacted with the admins' rules, which may be read from the database, and
        LangGraph calls put_writes from its own pool threads (a Django connection left
        open on each) or on the event loop (where Django refuses a query)."""
        return [
            spec
            for channel, interrupts in writes
            if channel == INTERRUPT
            for spec in approval_specs(interrupts, self.serde, task_path)
        ]

    def delete_thread(self, thread_id: str) -> None:
        on_db_thread(store.delete_thread, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        on_db_thread(store.delete_for_runs, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        on_db_thread(store.copy_thread, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        on_db_thread(store.prune, thread_ids, strategy)

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        # String versions with a random fraction, like the reference savers: two
        # branches forked from one checkpoint never share a (channel, version) blob.
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"


INLINE_TEXT = 256  # characters: a longer string is stored once, in the blob table


def _inline(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return -(2**63) <= value < 2**64  # what msgpack packs natively
    return value is None or kind in (bool, float) or (kind is str and len(value) <= INLINE_TEXT)


def _next_nodes(values: dict[str, Any]) -> list[str]:
    """The nodes this checkpoint will run next, read from the trigger channels'
    names only (no value is decoded)."""
    nodes = [c[len(BRANCH_PREFIX) :] for c in values if c.startswith(BRANCH_PREFIX)]
    if "__start__" in values:
        nodes.insert(0, "__start__")
    return nodes


def _asks(writes: Sequence[tuple[str, Any]]) -> bool:
    """Whether a task's writes hold an interrupt (which opens approvals)."""
    return any(channel == INTERRUPT for channel, _ in writes)


def _status_after(channels: Any) -> str | None:
    channels = set(channels)
    if ERROR in channels:
        return store.FAILED
    if INTERRUPT in channels:
        return store.INTERRUPTED
    if RESUME in channels:
        return store.RUNNING
    return None


class AsyncDurableRunsSaver(DurableRunsSaver):
    """The same saver for `graph.ainvoke`/`astream`. On Postgres its hot calls
    (aput, aput_writes, aget_tuple) run their one statement on the event loop's own
    psycopg connection (native.py); the rest, and every call on SQLite, wait for the
    saver thread without blocking the loop. Values are serialized on the loop, as
    the reference async savers do."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        records = await store.afetch(
            conf["thread_id"], conf.get("checkpoint_ns", ""), get_checkpoint_id(config), limit=1
        )
        if records is None:
            return await on_db_thread_async(self._get_tuple, config)
        return self._tuple(records[0]) if records else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await on_db_thread_async(
            self._list, config, filter=filter, before=before, limit=limit
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved, args = self._checkpoint_rows(config, checkpoint, metadata, new_versions)
        owner = current_owner.get()
        if not await store.aput_checkpoint(*args, graph=self.graph, owner=owner):
            # Not Postgres, or the fence refused: the saver thread's transaction creates
            # a thread racing into existence, or says why the thread is closed.
            await on_db_thread_async(store.put_checkpoint, *args, graph=self.graph, owner=owner)
        return saved

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        approvals = (
            await on_db_thread_async(self._approvals, writes, task_path) if _asks(writes) else []
        )
        rows = self._write_rows(config, writes, task_id, task_path, approvals)
        owner = current_owner.get()
        if not await store.aput_writes(*rows, owner=owner):
            await on_db_thread_async(store.put_writes, *rows, owner=owner, graph=self.graph)

    async def adelete_thread(self, thread_id: str) -> None:
        await on_db_thread_async(store.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await on_db_thread_async(store.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await on_db_thread_async(store.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await on_db_thread_async(store.prune, thread_ids, strategy)
