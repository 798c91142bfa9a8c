"""LangGraph's own conformance suite against the durableruns savers.

The suite detects capabilities from which async methods a saver overrides and
prints a level that is not a reliable pass signal, so both the exact capability
set and every test count are asserted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, DetectedCapabilities

from durableruns.langgraph import AsyncDurableRunsSaver, DurableRunsSaver

pytestmark = pytest.mark.django_db(transaction=True)

EIGHT = {c.value for c in ALL_CAPABILITIES}


class SyncThroughAsync(AsyncDurableRunsSaver):
    """Runs the suite's async calls through the SYNC saver's methods, each in a fresh
    thread (as LangGraph's sync loop does from its background executor), so the
    sync code paths meet the same 81 cases."""

    def __init__(self) -> None:
        super().__init__()
        self.sync = DurableRunsSaver()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)

    async def aget_tuple(self, config):
        return await self._call("get_tuple", config)

    async def alist(self, config, *, filter=None, before=None, limit=None):
        found = await asyncio.to_thread(
            lambda: list(self.sync.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(self, config, checkpoint, metadata, new_versions):
        return await self._call("put", config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes, task_id, task_path=""):
        return await self._call("put_writes", config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id):
        return await self._call("delete_thread", thread_id)

    async def adelete_for_runs(self, run_ids):
        return await self._call("delete_for_runs", run_ids)

    async def acopy_thread(self, source_thread_id, target_thread_id):
        return await self._call("copy_thread", source_thread_id, target_thread_id)

    async def aprune(self, thread_ids, *, strategy="keep_latest"):
        return await self._call("prune", thread_ids, strategy=strategy)


def _run_suite(factory: Any) -> Any:
    registered = checkpointer_test(name=factory.__name__)(factory)
    return asyncio.run(validate(registered))


def _assert_all_81(report: Any) -> None:
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert failures == {}
    assert report.passed_all_base()
    assert report.passed_all()
    assert {name for name, r in report.results.items() if r.detected} == EIGHT
    assert sum(r.tests_passed for r in report.results.values()) == 81
    assert sum(r.tests_failed + r.tests_skipped for r in report.results.values()) == 0


def test_the_async_saver_detects_all_eight_capabilities():
    detected = DetectedCapabilities.from_instance(AsyncDurableRunsSaver())
    assert {c.value for c in detected.detected} == EIGHT


def test_the_async_saver_passes_81_of_81():
    async def durableruns_async() -> AsyncIterator[AsyncDurableRunsSaver]:
        yield AsyncDurableRunsSaver()

    _assert_all_81(_run_suite(durableruns_async))


def test_the_sync_saver_passes_the_same_81_through_a_sync_wrapper():
    async def durableruns_sync() -> AsyncIterator[SyncThroughAsync]:
        yield SyncThroughAsync()

    _assert_all_81(_run_suite(durableruns_sync))


def test_the_suite_catches_a_broken_saver():
    """The assertions above can fail: a saver that forgets pending writes does not pass."""

    class Forgetful(AsyncDurableRunsSaver):
        async def aput_writes(self, config, writes, task_id, task_path=""):
            return None

    async def forgetful() -> AsyncIterator[Forgetful]:
        yield Forgetful()

    report = _run_suite(forgetful)
    assert not report.passed_all_base()
    assert report.results["put_writes"].tests_failed > 0
