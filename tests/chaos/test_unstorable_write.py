"""An unsafe write that executed, then returned what cannot be stored, on real workers:
the run escalates (never fails), and once resolved continues without sending again."""

from __future__ import annotations

import pytest

from durableruns.demo.models import ProviderCall
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from durableruns.services import escalations
from durableruns.testing import crashtest
from tests.conftest import TEST_LEASE_TTL, TEST_SWEEP_INTERVAL, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

MODULE = "tests.chaos.unstorable_agents"


@pytest.fixture
def cluster(provider_url, tmp_path, settings):
    __import__(MODULE)  # registers the agent here; the workers import it too
    settings.DURABLERUNS_AGENT_MODULES = [*settings.DURABLERUNS_AGENT_MODULES, MODULE]
    options = crashtest.Options(
        workers=1, lease_ttl=TEST_LEASE_TTL, sweep_interval=TEST_SWEEP_INTERVAL
    )
    with crashtest.Cluster(options, tmp_path) as running:
        yield running


def _status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def _sent(run_id: str) -> int:
    return ProviderCall.objects.filter(
        provider="email", outcome="executed", idempotency_key__startswith=f"{run_id}:"
    ).count()


def test_a_sent_email_whose_result_is_a_datetime_escalates_and_is_sent_once(cluster, bob):
    start_run("unstorable-email", {"to": "ann@example.com"}, run_id="unstorable-1")
    wait_for(lambda: _status("unstorable-1") == Run.Status.ESCALATED, message="escalation")
    effect = Effect.objects.get(run_id="unstorable-1")
    assert effect.state == Effect.State.UNKNOWN
    assert "email_with_timestamp" in effect.error["message"]
    assert "not JSON-serialisable" in effect.error["message"]
    assert _sent("unstorable-1") == 1

    escalations.resolve(effect, "happened", user=bob, result={"message_id": "msg_by_hand"})

    wait_for(lambda: _status("unstorable-1") in Run.TERMINAL, message="the run to finish")
    run = Run.objects.get(pk="unstorable-1")
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert run.result == {"message_id": "msg_by_hand"}
    assert _sent("unstorable-1") == 1
