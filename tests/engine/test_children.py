"""run.child() and run.children(): durable child runs, in-process executor, real Postgres.

tests/chaos/test_children.py does the same with real worker processes (SIGKILL, no sweeper).
"""

from __future__ import annotations

import threading
from unittest import mock

import psycopg
import pytest
from django.db import connection, connections

from durableruns.engine import children, executor
from durableruns.engine.children import child_id
from durableruns.engine.replay import dry_replay
from durableruns.engine.runs import RUN_ID_PATTERN, start_run
from durableruns.models import Approval, AuditEvent, Run, Step
from durableruns.services import approvals
from durableruns.services import runs as run_actions
from durableruns.services.sweeper import sweep
from tests import agents_children  # noqa: F401 - registers the agents
from tests.agents_children import CALLS
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]
Status = Run.Status


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _suspended(agent: str, task: dict, run_id: str) -> Run:
    run, _ = start_run(agent, task, run_id=run_id)
    assert executor.advance(run.id) == Status.AWAITING_CHILD
    return Run.objects.get(pk=run.id)


def test_the_parent_waits_holding_nothing_and_the_childs_end_wakes_it(rung):
    parent = _suspended("boss-one", {"n": 21}, "boss")
    assert (parent.lease_owner, parent.lease_expires_at) == ("", None)
    child = Run.objects.get(parent_run=parent)
    assert (child.id, child.parent_position, child.agent, child.status) == (
        "boss.c0",
        0,
        "kid-double",
        Status.QUEUED,
    )
    assert child.id in rung  # the child was rung at once
    assert executor.advance(parent.id) == "skipped"  # a stray doorbell does not run it

    rung.clear()
    assert executor.advance(child.id) == "succeeded"
    assert _status(parent.id) == Status.QUEUED  # woken by the child's end, no sweep
    assert rung == [parent.id]

    assert executor.advance(parent.id) == "succeeded"
    finished = Run.objects.get(pk=parent.id)
    assert finished.result == {"got": {"doubled": 42}, "after": "continued"}
    step = Step.objects.get(run=parent, position=0)
    assert (step.kind, step.name, step.result) == ("child", "kid-double", {"doubled": 42})
    assert step.input["input"] == {"n": 21}
    assert CALLS["double"] == 1


def test_replay_never_starts_a_second_child(rung):
    parent = _suspended("boss-one", {"n": 2}, "replayed")
    # The parent's worker died after the child was created: another pass replays it.
    Run.objects.filter(pk=parent.id).update(status=Status.QUEUED)
    assert executor.advance(parent.id) == Status.AWAITING_CHILD
    assert Run.objects.filter(parent_run=parent).count() == 1
    assert executor.advance("replayed.c0") == "succeeded"
    assert executor.advance(parent.id) == "succeeded"
    assert CALLS["double"] == 1
    report = dry_replay(Run.objects.get(pk=parent.id))
    assert report.ok and report.ending == "returned", report.lines()
    assert Run.objects.filter(parent_run=parent).count() == 1


def test_a_fan_out_starts_every_child_then_waits_for_all_in_submission_order(rung):
    parent = _suspended("boss-fanout", {"ns": [1, 2, 3]}, "fan")
    kids = list(Run.objects.filter(parent_run=parent).order_by("parent_position"))
    assert [k.id for k in kids] == ["fan.c0", "fan.c1", "fan.c2"]
    assert all(k.status == Status.QUEUED for k in kids)
    for kid in reversed(kids[1:]):  # they finish in another order than they were given
        assert executor.advance(kid.id) == "succeeded"
        assert _status(parent.id) == Status.AWAITING_CHILD  # still waiting for one
    assert executor.advance(kids[0].id) == "succeeded"
    assert _status(parent.id) == Status.QUEUED
    assert executor.advance(parent.id) == "succeeded"
    assert Run.objects.get(pk=parent.id).result == {"results": [2, 4, 6]}
    steps = Step.objects.filter(run=parent).order_by("position")
    assert [(s.position, s.kind) for s in steps] == [(0, "child"), (1, "child"), (2, "child")]


def test_children_that_finish_before_the_parent_suspends_queue_it_at_once(rung, monkeypatch):
    """The race gates.py has for decisions: a child ends between its creation and the
    parent's release. The parent then releases to queued itself."""
    real = children.release_awaiting

    def child_finishes_first(lease, **fields):
        executor.advance(child_id(lease.run_id, 0))
        return real(lease, **fields)

    monkeypatch.setattr(children, "release_awaiting", child_finishes_first)
    run, _ = start_run("boss-one", {"n": 4}, run_id="quick")
    assert executor.advance(run.id) == Status.QUEUED
    monkeypatch.undo()
    assert executor.advance(run.id) == "succeeded"
    assert Run.objects.get(pk=run.id).result["got"] == {"doubled": 8}


def test_a_child_failure_is_a_permanent_step_error_the_parent_can_read(rung):
    parent = _suspended("boss-catches", {"input": {"item": "mug"}}, "careful")
    assert executor.advance("careful.c0") == "failed"
    assert executor.advance(parent.id) == "succeeded"
    result = Run.objects.get(pk=parent.id).result
    assert result["caught"] == "ChildRunFailed"
    assert "child run careful.c0 (kid-fails) failed" in result["message"]
    assert "no stock for mug" in result["message"]
    step = Step.objects.get(run=parent, position=0)
    assert step.error["type"] == "ChildRunFailed" and step.result is None


def test_an_unhandled_child_failure_fails_the_parent_with_its_message(rung):
    parent = _suspended("boss-strict", {}, "strict")
    executor.advance("strict.c0")
    assert executor.advance(parent.id) == "failed"
    error = Run.objects.get(pk=parent.id).error
    assert error["type"] == "ChildRunFailed"
    assert "no stock for mug" in error["message"]


def test_a_fan_out_can_take_each_failure_in_its_childs_place(rung):
    parent = _suspended("boss-mixed", {}, "mixed")
    for kid in Run.objects.filter(parent_run=parent):
        executor.advance(kid.id)
    assert executor.advance(parent.id) == "succeeded"
    results = Run.objects.get(pk=parent.id).result["results"]
    assert results[0] == {"doubled": 2} and results[2] == {"doubled": 6}
    assert "mixed.c1 (kid-fails) failed: no stock for bike" in results[1]


def test_a_cancelled_child_fails_the_parents_step_with_a_clear_error(rung, bob):
    parent = _suspended("boss-catches", {"kid": "kid-asks", "input": {"item": "bike"}}, "c")
    assert executor.advance("c.c0") == Status.AWAITING_APPROVAL
    assert run_actions.cancel(Run.objects.get(pk="c.c0"), user=bob)
    assert _status(parent.id) == Status.QUEUED  # the cancel woke it
    assert executor.advance(parent.id) == "succeeded"
    result = Run.objects.get(pk=parent.id).result
    assert result["caught"] == "ChildRunCancelled"
    assert "child run c.c0 (kid-asks) was cancelled" in result["message"]


def test_cancelling_a_parent_cancels_its_unfinished_descendants_each_audited(rung, bob):
    top = _suspended("boss-nested", {"inner": "boss-asks", "input": {"item": "bike"}}, "top")
    assert executor.advance("top.c0") == Status.AWAITING_CHILD
    assert executor.advance("top.c0.c0") == Status.AWAITING_APPROVAL
    approval = Approval.objects.get(run_id="top.c0.c0")

    assert run_actions.cancel(top, user=bob, reason="wrong customer")
    statuses = dict(Run.objects.filter(pk__startswith="top").values_list("id", "status"))
    assert statuses == {"top": "cancelled", "top.c0": "cancelled", "top.c0.c0": "cancelled"}
    approval.refresh_from_db()
    assert approval.state == Approval.State.CLOSED  # out of the reviewers' inbox
    audited = AuditEvent.objects.filter(action="run.cancel").order_by("pk")
    assert [(e.target_id, e.actor_id) for e in audited] == [
        ("top", bob.pk),
        ("top.c0", bob.pk),
        ("top.c0.c0", bob.pk),
    ]
    assert audited[1].after["reason"] == "cancelled with its parent run top"
    assert not run_actions.cancel(top, user=bob)  # repeating it changes nothing


def test_a_finished_child_is_left_alone_by_the_cascade(rung, bob):
    parent = _suspended("boss-fanout", {"ns": [1, 2]}, "half")
    executor.advance("half.c0")
    run_actions.cancel(parent, user=bob)
    statuses = dict(Run.objects.filter(parent_run=parent).values_list("id", "status"))
    assert statuses == {"half.c0": "succeeded", "half.c1": "cancelled"}


def test_the_sweeper_wakes_a_parent_whose_wake_was_lost(rung, monkeypatch):
    parent = _suspended("boss-one", {"n": 3}, "lost")
    monkeypatch.setattr(children, "wake_parent", lambda parent_id: False)  # a crash there
    assert executor.advance("lost.c0") == "succeeded"
    assert _status(parent.id) == Status.AWAITING_CHILD
    monkeypatch.undo()
    sweep()
    assert _status(parent.id) == Status.QUEUED
    assert executor.advance(parent.id) == "succeeded"
    sweep()  # nothing left to wake
    assert _status(parent.id) == Status.SUCCEEDED


def test_the_sweeper_leaves_a_parent_with_an_unfinished_child_waiting(rung):
    parent = _suspended("boss-fanout", {"ns": [1, 2]}, "patient")
    executor.advance("patient.c0")
    sweep()
    assert _status(parent.id) == Status.AWAITING_CHILD


def test_a_child_that_asks_for_approval_resumes_its_parent_once_decided(rung, alice):
    parent = _suspended("boss-asks", {"item": "kayak"}, "asks")
    assert executor.advance("asks.c0") == Status.AWAITING_APPROVAL
    approval = Approval.objects.select_related("run").get(run_id="asks.c0")
    approvals.decide(approval, "approve", user=alice)
    assert executor.advance("asks.c0") == "succeeded"
    assert executor.advance(parent.id) == "succeeded"
    result = Run.objects.get(pk=parent.id).result
    assert result["shipped"] == {"approved": True, "by": "alice"}


def test_another_child_at_the_same_position_is_a_non_determinism_error(rung):
    parent = _suspended("boss-one", {"n": 1}, "nd")
    Run.objects.filter(pk="nd.c0").update(agent="kid-fails")  # not what the code asks for
    Run.objects.filter(pk=parent.id).update(status=Status.QUEUED)
    assert executor.advance(parent.id) == "failed"
    error = Run.objects.get(pk=parent.id).error
    assert error["code"] == "non_determinism"
    assert "child run nd.c0 is kid-fails@1" in error["message"]


def test_a_child_whose_parent_failed_meanwhile_is_cancelled_by_the_next_sweep(rung):
    """The parent was requeued after a crash and its new code diverged (a deploy): it
    failed while its child was still queued. Nothing waits for that child any more."""
    parent = _suspended("boss-one", {"n": 1}, "orphan")
    Run.objects.filter(pk="orphan.c0").update(agent="kid-fails")
    Run.objects.filter(pk=parent.id).update(status=Status.QUEUED)
    assert executor.advance(parent.id) == "failed"
    assert _status("orphan.c0") == Status.QUEUED

    sweep()

    assert _status("orphan.c0") == Status.CANCELLED
    assert executor.advance("orphan.c0") == "skipped"
    event = AuditEvent.objects.get(action="run.cancel", target_id="orphan.c0")
    assert event.actor_name == "system"
    assert event.after["reason"] == "its parent run orphan ended (failed)"
    assert _status(parent.id) == Status.FAILED  # the parent is not woken again


def test_a_failed_child_an_operator_resumes_after_its_parent_failed_is_left_to_run(rung, carol):
    """The parent recorded the child's failure: the child is no orphan, and resuming it is
    an operator's deliberate act the sweeper must not undo."""
    parent, _ = start_run("boss-strict", {}, run_id="strict")
    assert executor.advance(parent.id) == Status.AWAITING_CHILD
    assert executor.advance("strict.c0") == "failed"
    assert executor.advance(parent.id) == "failed"
    assert run_actions.resume(Run.objects.get(pk="strict.c0"), user=carol, reason="retry it")

    sweep()

    assert _status("strict.c0") == Status.QUEUED


def test_each_child_is_a_step_of_the_parents_budget_and_has_its_own(rung, settings):
    run, _ = start_run("boss-small", {"ns": [1, 2, 3]}, run_id="small")  # max_steps=2
    assert executor.advance(run.id) == "failed"
    assert Run.objects.get(pk=run.id).error["code"] == "budget_exceeded"
    assert not Run.objects.filter(parent_run_id="small").exists()  # none started for nothing
    run, _ = start_run("boss-small", {"ns": [1, 2]}, run_id="fits")
    assert executor.advance(run.id) == Status.AWAITING_CHILD
    # Budgets are not inherited: each child has its own agent's (here the defaults).
    kids = Run.objects.filter(parent_run_id="fits")
    assert {(k.agent, k.agent_version, k.max_steps) for k in kids} == {
        ("kid-double", "1", settings.DURABLERUNS_DEFAULT_MAX_STEPS)
    }


def test_a_sandboxed_parent_starts_sandboxed_children(rung):
    run, _ = start_run("boss-one", {"n": 1}, run_id="sandboxed")
    Run.objects.filter(pk=run.id).update(sandbox=True)
    executor.advance(run.id)
    assert Run.objects.get(pk="sandboxed.c0").sandbox


def test_child_ids_are_deterministic_valid_and_bounded():
    assert child_id("parent", 3) == "parent.c3"
    long = "p" * 64
    assert child_id(long, 12) == child_id(long, 12)
    assert child_id(long, 12) != child_id(long[:-1] + "q", 12)
    for parent in ("x", "a" * 60, long, child_id(long, 7)):
        made = child_id(parent, 123)
        assert len(made) <= 64 and RUN_ID_PATTERN.match(made), made


def test_bad_child_requests_are_refused_before_anything_is_recorded(rung):
    import durableruns as dr

    @dr.agent("boss-misuses", version="1")
    def boss_misuses(run: dr.Run, task: dict) -> dict:
        return run.child(task["agent"], task["input"])

    run, _ = start_run("boss-misuses", {"agent": "no-such-agent", "input": {}}, run_id="bad1")
    assert executor.advance(run.id) == "failed"
    assert "unknown agent 'no-such-agent'" in Run.objects.get(pk=run.id).error["message"]
    run, _ = start_run("boss-misuses", {"agent": "kid-double", "input": [1]}, run_id="bad2")
    assert executor.advance(run.id) == "failed"
    assert "must be a JSON object" in Run.objects.get(pk=run.id).error["message"]

    # An input the child agent's schema refuses is refused at the call, like the rest.
    @dr.agent("kid-schema", version="1", input_schema={"required": ["order_id"]})
    def kid_schema(run: dr.Run, task: dict) -> dict:
        return task

    run, _ = start_run("boss-misuses", {"agent": "kid-schema", "input": {}}, run_id="bad3")
    assert executor.advance(run.id) == "failed"
    assert "does not fit agent 'kid-schema'" in Run.objects.get(pk=run.id).error["message"]
    bad = ["bad1", "bad2", "bad3"]
    assert not Run.objects.filter(parent_run__in=bad).exists()
    assert not Step.objects.filter(run_id__in=bad).exists()


def test_a_parent_and_its_child_cancelled_at_once_are_both_cancelled(rung, bob, carol):
    """Two operators, one on the parent's page and one on the child's, press Cancel at
    the same moment. Each cancel locks the parent before the child, so neither waits
    for the other in a cycle (Postgres would abort one of them as a deadlock)."""
    _suspended("boss-asks", {"item": "bike"}, "both")
    assert executor.advance("both.c0") == Status.AWAITING_APPROVAL
    child_locked, errors = threading.Event(), []
    real_wake = children.wake_parent

    def wake_once_the_parent_is_being_cancelled(parent_id):
        if parent_id == "both":  # the child's cancel, holding the child's row
            child_locked.set()
            wait_for(_a_session_waits_for_a_lock, timeout=10, message="the parent's cancel")
        return real_wake(parent_id)

    def cancel(run_id, user, reason):
        try:
            run_actions.cancel(Run.objects.get(pk=run_id), user=user, reason=reason)
        except Exception as exc:  # a deadlock, as the request would have seen it
            errors.append(exc)
        finally:
            connection.close()

    with mock.patch.object(children, "wake_parent", wake_once_the_parent_is_being_cancelled):
        child = threading.Thread(target=cancel, args=("both.c0", carol, "not needed"))
        child.start()
        child_locked.wait(timeout=10)
        parent = threading.Thread(target=cancel, args=("both", bob, "wrong customer"))
        parent.start()
        for thread in (child, parent):
            thread.join(timeout=30)

    assert errors == []
    statuses = dict(Run.objects.filter(pk__startswith="both").values_list("id", "status"))
    assert statuses == {"both": "cancelled", "both.c0": "cancelled"}


def _a_session_waits_for_a_lock() -> bool:
    # A session of its own: inside a transaction, pg_stat_activity is a snapshot.
    params = connections["default"].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as session:
        waiting = session.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    return waiting[0] > 0
