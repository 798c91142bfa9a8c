"""Child runs with real worker processes: a SIGKILLed parent never starts a child twice,
a child's end wakes its parent without any sweep, a crash between the two is recovered
by the sweeper, and an approval inside a child, decided in the inbox, resumes the child
and then the parent."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from django.test import Client
from django.urls import reverse

import tests.agents_children  # noqa: F401 - registers the agents in this process too
from durableruns.demo.models import ProviderCall
from durableruns.engine import crashpoints
from durableruns.engine.runs import start_run
from durableruns.models import Approval, Run, Step, SweeperBeat
from tests.agents_children import MODULES
from tests.conftest import Processes, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]
NO_SWEEPER = {"DURABLERUNS_SWEEPER_IN_WORKERS": "0"}


@pytest.fixture
def workers(processes: Processes, crash_dir) -> Processes:
    processes.env["DURABLERUNS_AGENT_MODULES"] = MODULES
    processes.env["DURABLERUNS_CRASH_DIR"] = str(crash_dir)
    return processes


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _finished(run_id: str) -> bool:
    return _status(run_id) in Run.TERMINAL


def _emails(run_id: str) -> Counter:
    rows = ProviderCall.objects.filter(
        idempotency_key__startswith=f"{run_id}:", outcome=ProviderCall.Outcome.EXECUTED
    )
    return Counter(rows.values_list("provider", flat=True))


def test_killing_the_parents_worker_after_a_child_started_never_starts_it_twice(workers, crash_dir):
    # Killed at the start of step 1, when child 0 is created (committed) and child 1 not.
    crashpoints.arm(crash_dir, "boss", crashpoints.BEFORE_STEP, 1)
    workers.worker()
    workers.worker()
    start_run("boss-mails", {"to": ["ada@example.com", "grace@example.com"]}, run_id="boss")
    wait_for(lambda: _finished("boss"), timeout=90, message="the parent to finish")
    assert crashpoints.fired(crash_dir, "boss") is not None, "the crash never fired"
    parent = Run.objects.get(pk="boss")
    assert parent.status == Run.Status.SUCCEEDED, parent.error
    assert parent.leases_taken >= 2  # resumed by another worker after the kill
    kids = list(Run.objects.filter(parent_run=parent).order_by("id"))
    assert [k.id for k in kids] == ["boss.c0", "boss.c1"]
    assert all(k.status == Run.Status.SUCCEEDED for k in kids)
    for kid in kids:
        assert _emails(kid.id) == {"email": 1}  # each child's effect exactly once
    assert parent.result["sent"] == [k.result["message_id"] for k in kids]


def test_a_childs_end_wakes_its_parent_with_no_sweeper_anywhere(workers):
    workers.worker(extra_env=NO_SWEEPER)  # and no beat: nothing ever sweeps
    start_run("boss-naps", {"seconds": 1}, run_id="woken")
    wait_for(lambda: _status("woken") == Run.Status.AWAITING_CHILD, message="the parent to wait")
    held = Run.objects.get(pk="woken")
    assert (held.lease_owner, held.lease_expires_at) == ("", None)  # holds no worker
    wait_for(lambda: _finished("woken"), timeout=30, message="the parent to finish")
    parent = Run.objects.get(pk="woken")
    assert parent.status == Run.Status.SUCCEEDED, parent.error
    assert parent.result == {"child": {"napped": 1}}
    assert not SweeperBeat.objects.exists()  # no sweep ran: the child's end rang it


def test_a_crash_between_a_childs_end_and_its_parents_wake_is_recovered_by_the_sweeper(
    workers, crash_dir
):
    crashpoints.arm(crash_dir, "lost", crashpoints.AFTER_CHILD_FINISHED, 0)
    workers.worker()
    workers.worker()
    start_run("boss-one", {"n": 7}, run_id="lost")
    wait_for(lambda: _finished("lost"), timeout=90, message="the parent to finish")
    fired = crashpoints.fired(crash_dir, "lost")
    assert fired is not None and fired["point"] == crashpoints.AFTER_CHILD_FINISHED
    parent = Run.objects.get(pk="lost")
    assert parent.status == Run.Status.SUCCEEDED, parent.error
    assert parent.result["got"] == {"doubled": 14}
    assert Step.objects.filter(run_id="lost.c0", name="double").count() == 1
    assert SweeperBeat.objects.exists()  # the sweeper woke it


def test_an_approval_in_a_child_decided_in_the_inbox_resumes_the_child_then_the_parent(
    workers, alice
):
    workers.worker(extra_env=NO_SWEEPER)
    start_run("boss-asks", {"item": "kayak"}, run_id="asks")
    approval = wait_for(
        lambda: Approval.objects.filter(run_id="asks.c0", state="pending").first(),
        message="the child's approval",
    )
    assert _status("asks") == Run.Status.AWAITING_CHILD
    browser = Client()
    browser.force_login(alice)
    inbox = browser.get(reverse("approvals"))
    assert b"asks.c0" in inbox.content and b'href="/runs/asks/"' in inbox.content
    answer = browser.post(reverse("decide_approval", args=[approval.pk]), {"decision": "approve"})
    assert answer.status_code in (200, 302)
    wait_for(lambda: _finished("asks"), timeout=30, message="the parent to finish")
    parent = Run.objects.get(pk="asks")
    assert parent.status == Run.Status.SUCCEEDED, parent.error
    assert parent.result == {"shipped": {"approved": True, "by": "alice"}, "after": "continued"}
    child = Run.objects.get(pk="asks.c0")
    assert child.finished_at <= parent.finished_at


@pytest.fixture
def child_agents(settings):
    settings.DURABLERUNS_AGENT_MODULES = MODULES.split(",")
    settings.DURABLERUNS_PROVIDER_URL = "http://127.0.0.1:9"  # crashtest serves the providers


def test_crashtest_kills_a_fan_out_between_each_childs_end_and_the_parents_wake(
    child_agents, capsys
):
    from django.core.management import call_command

    task = '{"to": ["ada@example.com", "grace@example.com"]}'
    call_command("crashtest", "boss-mails", "--input", task, "--workers", "2")
    out = capsys.readouterr().out
    for position in (0, 1):
        step = f"{position}-kid-mails"
        assert re.search(rf"^after_child_finished\s+{step}\s+resumed\s+0\s+0\s", out, re.M), out
    assert "0 duplicate executions, 0 lost" in out


def test_the_readme_orchestrator_and_the_demo_refund_desk_finish_with_each_effect_once(workers):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = re.search(
        r"# --- README: orchestrator ---\n(.*)# --- end ---",
        (root / "tests" / "agents_children.py").read_text(),
        re.S,
    )
    assert f"```python\n{code.group(1).strip()}\n```" in (root / "README.md").read_text()

    workers.worker()
    workers.worker()
    start_run("support-desk", {"item": "kettle", "order_id": "A-1001"}, run_id="desk")
    start_run("refund-desk", {"order_ids": ["A-1001", "A-1003"]}, run_id="refunds")
    wait_for(lambda: _finished("desk") and _finished("refunds"), timeout=90, message="both")
    desk = Run.objects.get(pk="desk")
    assert desk.status == Run.Status.SUCCEEDED, desk.error
    assert desk.result["refunded"] is True and desk.result["sources"]
    assert _emails("desk.c0") == {"email": 1}
    assert _emails("desk.c1") == {"payments": 1, "email": 1}
    refunds = Run.objects.get(pk="refunds")
    assert refunds.status == Run.Status.SUCCEEDED, refunds.error
    assert refunds.result["refunded"] == ["A-1001", "A-1003"]
    assert refunds.result["cents"] == 4_500 + 1_299
    for kid in ("refunds.c0", "refunds.c1"):
        assert _emails(kid) == {"payments": 1, "email": 1}
