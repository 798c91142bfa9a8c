"""Fork from step N with real worker processes: only the effects from N run again, with
new keys; a sandbox fork calls no write tool and records what it would have called."""

from __future__ import annotations

from collections import Counter

import pytest

from durableruns.demo.models import ModelCall, ProviderCall
from durableruns.engine.replay import fork_preview
from durableruns.engine.runs import start_run
from durableruns.models import AuditEvent, Effect, Run
from durableruns.services.runs import fork
from tests.conftest import wait_for
from tests.engine.recorded import REFUND

pytestmark = pytest.mark.django_db(transaction=True)


def _finished(run_id: str) -> Run | None:
    run = Run.objects.get(pk=run_id)
    return run if run.status in Run.TERMINAL else None


def _executed(run_id: str) -> Counter:
    """What the stand-in providers really executed for this run, by step."""
    keys = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run_id}:", outcome=ProviderCall.Outcome.EXECUTED
    ).values_list("idempotency_key", flat=True)
    return Counter(key.split(":")[1] for key in keys)


def _models(run_id: str) -> Counter:
    rows = ModelCall.objects.filter(idempotency_key__startswith=f"{run_id}:")
    return Counter(rows.values_list("step", flat=True))


@pytest.fixture
def parent(processes) -> Run:
    processes.worker()
    run, _ = start_run("refund-bot", REFUND, run_id="parent")
    done = wait_for(lambda: _finished(run.id), message="the parent run")
    assert done.status == Run.Status.SUCCEEDED, done.error
    return done


def test_it_forks_from_a_middle_step_and_runs_only_the_effects_from_there(parent, bob):
    before = {"parent": _executed("parent"), "models": _models("parent")}
    preview = fork_preview(parent, 2)
    assert [(e.position, e.tool) for e in preview] == [(2, "refund"), (3, "send_email")]

    child = fork(parent, 2, user=bob)
    done = wait_for(lambda: _finished(child.id), message="the fork")
    assert done.status == Run.Status.SUCCEEDED, done.error
    assert (done.parent_id, done.fork_position) == ("parent", 2)
    # The refund and the email really ran again, once each, under the fork's keys...
    assert _executed(child.id) == Counter({"2-refund": 1, "3-send_email": 1})
    keys = set(Effect.objects.filter(run=done).values_list("idempotency_key", flat=True))
    assert keys.isdisjoint({e.idempotency_key for e in preview})
    # ...the plan and the order lookup were reused, and only the summary was asked again.
    assert _models(child.id) == Counter({"summary": 1})
    assert _executed("parent") == before["parent"] and _models("parent") == before["models"]
    assert done.result["actions"] == parent.result["actions"]
    assert AuditEvent.objects.filter(action="run.fork", actor_name="bob").count() == 1


def test_a_sandbox_fork_calls_no_write_tool(parent, bob):
    child = fork(parent, 1, user=bob, sandbox=True)
    done = wait_for(lambda: _finished(child.id), message="the sandbox fork")
    assert done.status == Run.Status.SUCCEEDED, done.error
    assert _executed(child.id) == Counter()
    assert not ProviderCall.objects.filter(idempotency_key__startswith=f"{child.id}:").exists()
    sandboxed = Effect.objects.filter(run=done).order_by("position")
    assert [(e.tool, e.state) for e in sandboxed] == [
        ("refund", Effect.State.SANDBOXED),
        ("send_email", Effect.State.SANDBOXED),
    ]
    assert sandboxed[0].args == {"order_id": "A-1001", "cents": 4500, "fail_first": 0}
    assert done.result["refund_id"] == "re_sandbox"
