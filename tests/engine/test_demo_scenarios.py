"""`make demo`'s runs show, within seconds of starting, each thing a newcomer reads
about: an approval, a question a reviewer answers in words ("respond"), and an
escalation (a refund whose outcome the provider lost)."""

from __future__ import annotations

import pytest

from durableruns.demo.models import ProviderCall
from durableruns.engine.runs import start_run
from durableruns.management.commands.demo import DEMO_RUNS
from durableruns.models import Approval, Effect, Run
from durableruns.services import approvals

pytestmark = pytest.mark.django_db(transaction=True)


def _start_demo_run(run_id: str) -> None:
    agent, run_input = next((a, i) for a, i, rid in DEMO_RUNS if rid == run_id)
    start_run(agent, run_input, run_id=run_id)


def test_a_demo_run_asks_a_question_answered_in_words(drive, provider_url, alice):
    _start_demo_run("demo-replacement")
    assert drive("demo-replacement").status == Run.Status.AWAITING_APPROVAL
    question = Approval.objects.get(run_id="demo-replacement")
    assert "respond" in question.allowed
    approvals.decide(question, "respond", user=alice, comment="the Leeds warehouse")
    run = drive("demo-replacement")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result["ships_from"] == "the Leeds warehouse"
    email = ProviderCall.objects.get(provider="email")
    assert "the Leeds warehouse" in email.payload["body"]


def test_a_demo_run_escalates_at_once(drive, provider_url):
    _start_demo_run("demo-refund-lost-answer")
    run = drive("demo-refund-lost-answer")
    assert run.status == Run.Status.ESCALATED, (run.status, run.error)
    effect = Effect.objects.get(run_id="demo-refund-lost-answer", tool="refund_unsafe")
    assert effect.state == Effect.State.UNKNOWN
    # The provider did refund: only a person who checks can say so.
    assert ProviderCall.objects.filter(provider="payments").count() == 1
