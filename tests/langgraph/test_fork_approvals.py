"""A LangGraph thread's fork obeys the rule native forks do (services.runs): a guarded
effect executes only under a decision recorded by someone allowed to make it, for
exactly the arguments it guarded. A fork never carries a "yes" into a new thread:
an interrupt at the fork checkpoint is asked of a reviewer again, and a checkpoint
past an approval is refused; a rejection may be carried (it executes nothing)."""

from __future__ import annotations

import pytest
from django.test import Client

from durableruns.langgraph import DurableRunsSaver
from durableruns.langgraph.resume import resume_thread
from durableruns.langgraph.store import run_id_for
from durableruns.models import Approval, AuditEvent, Run
from durableruns.services import approvals as approval_service
from tests.langgraph.graphs import refund_builder

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def registered(settings):
    settings.DURABLERUNS_LANGGRAPH_GRAPHS = ["refund=tests.langgraph.graphs:refund_graph"]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def _graph():
    return refund_builder().compile(checkpointer=DurableRunsSaver(graph="refund"))


def _decided(thread: str, decision: str, reviewer) -> None:
    """A 100-cent refund the reviewer decided, and the worker resumed with it."""
    _graph().invoke({"order": "P-1", "cents": 100}, _config(thread))
    approval = Approval.objects.get(run_id=run_id_for(thread))
    approval_service.decide(approval, decision, user=reviewer, comment="decided by alice")
    assert resume_thread(run_id_for(thread)) == "resumed 1 interrupt(s)"


def _checkpoint(thread: str, next_nodes: tuple[str, ...]) -> str:
    state = next(s for s in _graph().get_state_history(_config(thread)) if s.next == next_nodes)
    return state.config["configurable"]["checkpoint_id"]


def _fork_by_web(operator, thread: str, checkpoint_id: str):
    client = Client()
    client.force_login(operator)
    return client.post(
        f"/runs/{run_id_for(thread)}/langgraph-fork/", {"checkpoint_id": checkpoint_id}
    )


def _fork_by_api(operator, thread: str, body: dict):
    client = Client()
    client.force_login(operator)
    return client.post(
        f"/api/runs/{run_id_for(thread)}/fork/", body, content_type="application/json"
    )


def _log(run: Run) -> list[str]:
    return _graph().get_state(_config(run.langgraph_thread.thread_id)).values["log"]


@pytest.mark.parametrize("path", ["web", "api"])
def test_a_fork_at_an_approved_interrupt_asks_a_reviewer_again(path, alice, bob):
    _decided(f"approved-{path}", "approve", alice)
    asked = _checkpoint(f"approved-{path}", ("ask_human",))

    if path == "web":
        assert _fork_by_web(bob, f"approved-{path}", asked).status_code == 302
    else:
        assert _fork_by_api(bob, f"approved-{path}", {"checkpoint_id": asked}).status_code == 201
    child = Run.objects.get(parent_id=run_id_for(f"approved-{path}"))
    resume_thread(child.id)  # what the worker does with a thread it is rung for

    # Old code: the fork copied alice's "approve" and paid a second time, asking nobody.
    assert "paid" not in _log(child)
    child.refresh_from_db()
    assert child.status == Run.Status.AWAITING_APPROVAL
    fresh = Approval.objects.get(run=child)
    assert (fresh.state, fresh.decider_name, fresh.payload) == (
        "pending",
        "",
        {"order": "P-1", "cents": 100},
    )
    fork = AuditEvent.objects.get(action="run.fork", target_id=run_id_for(f"approved-{path}"))
    assert fork.actor_name == "bob" and fork.after["approvals_asked_again"] == ["ask_human"]


@pytest.mark.parametrize("path", ["web", "api"])
def test_a_fork_past_an_approval_is_refused(path, alice, bob):
    _decided(f"past-{path}", "approve", alice)
    past = _checkpoint(f"past-{path}", ("pay",))

    if path == "web":
        response = _fork_by_web(bob, f"past-{path}", past)
        assert response.status_code == 302 and response["Location"].endswith(
            f"/runs/{run_id_for(f'past-{path}')}/"
        )
    else:
        response = _fork_by_api(bob, f"past-{path}", {"checkpoint_id": past})
        assert response.status_code == 400
        assert "ask_human" in response.json()["detail"]

    # Old code: the fork started at `pay` with alice's approval in its state.
    assert not Run.objects.filter(parent_id=run_id_for(f"past-{path}")).exists()


def test_a_fork_of_a_rejected_interrupt_pays_nothing_until_a_reviewer_approves(alice, bob):
    _decided("rejected", "reject", alice)
    child_id = _fork_by_api(
        bob, "rejected", {"checkpoint_id": _checkpoint("rejected", ("ask_human",))}
    ).json()["id"]
    child = Run.objects.get(pk=child_id)
    resume_thread(child.id)
    fresh = Approval.objects.get(run=child)

    # The operator cannot answer the fork's interrupt in durableruns...
    client = Client()
    client.force_login(bob)
    decided = client.post(
        f"/api/approvals/{fresh.pk}/decide/", {"decision": "approve"}, "application/json"
    )
    assert decided.status_code == 403
    assert "paid" not in _log(child)
    # ...a reviewer can, and then it pays, once.
    approval_service.decide(fresh, "approve", user=alice)
    resume_thread(child.id)
    assert _log(child) == ["lookup", "ask_human", "paid"]


def test_a_fork_past_a_rejection_carries_the_rejection(alice, bob):
    _decided("carried", "reject", alice)

    response = _fork_by_api(bob, "carried", {"checkpoint_id": _checkpoint("carried", ("pay",))})

    child = Run.objects.get(pk=response.json()["id"])
    resume_thread(child.id)
    assert _log(child) == ["lookup", "ask_human", "not paid"]


@pytest.mark.parametrize(
    "edit",
    [
        {"output": {"decision": "approve", "approved": True}},
        {"input": {"order": "P-1", "cents": 1000000}},
        {"position": 2},
        {"reuse_approvals": True},
    ],
)
def test_an_api_fork_of_a_thread_refuses_edits_and_decisions(edit, alice, bob):
    _decided("forged", "reject", alice)
    body = {"checkpoint_id": _checkpoint("forged", ("ask_human",)), **edit}

    response = _fork_by_api(bob, "forged", body)

    assert response.status_code == 400
    assert "checkpoint_id" in response.json()["detail"]
    assert not Run.objects.filter(parent_id=run_id_for("forged")).exists()


def test_a_fork_at_a_pending_interrupt_opens_its_own_approval(alice, bob):
    _graph().invoke({"order": "P-2", "cents": 100}, _config("undecided"))

    _fork_by_web(bob, "undecided", _checkpoint("undecided", ("ask_human",)))

    child = Run.objects.get(parent_id=run_id_for("undecided"))
    resume_thread(child.id)
    # Old code: the fork waited on the copied interrupt with no approval in any inbox.
    assert Approval.objects.get(run=child).state == "pending"
    assert Approval.objects.get(run_id=run_id_for("undecided")).state == "pending"
