from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from durableruns.engine import doorbell, executor
from durableruns.engine.runs import start_run
from durableruns.models import Effect, Run
from tests.api import agents


@pytest.fixture(autouse=True)
def _fast_passwords(settings) -> None:
    # The named actors are created per test; a production-strength hash costs ~0.5 s each.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def rung(monkeypatch) -> list[str]:
    """Doorbells rung during the test, instead of messages to a broker nobody consumes."""
    agents.NOTES.clear()
    rings: list[str] = []
    monkeypatch.setattr(doorbell, "_publish", lambda run_id, countdown: rings.append(run_id))
    return rings


@pytest.fixture
def recorded(db) -> Run:
    """A finished t-api run: steps 0 (compute), 1 (write tool, one effect), 2 (compute)."""
    run, _ = start_run("t-api", {"text": "hi"}, run_id="recorded")
    assert executor.advance(run.id) == Run.Status.SUCCEEDED
    return Run.objects.get(pk=run.id)


@pytest.fixture
def pending(db) -> Run:
    run, _ = start_run("t-api", {"text": "later"}, run_id="pending")
    return run


@pytest.fixture
def broken(db) -> Run:
    return Run.objects.create(
        id="broken",
        agent="t-api",
        agent_version="1",
        input={"text": "x"},
        status=Run.Status.FAILED,
        error={"type": "PermanentError", "message": "boom"},
        max_steps=10,
        max_duration_seconds=60,
        finished_at=timezone.now(),
    )


@pytest.fixture
def gated(db) -> Run:
    """A run waiting for a reviewer at its first step (approval id in `.approval`)."""
    run, _ = start_run("t-api-gate", {}, run_id="gated")
    assert executor.advance(run.id) == Run.Status.AWAITING_APPROVAL
    run.approval = run.approvals.get()
    return run


@pytest.fixture
def escalated(recorded) -> Effect:
    """The recorded run's write, as if a crash had left its outcome unknown."""
    Run.objects.filter(pk=recorded.pk).update(status=Run.Status.ESCALATED)
    effect = recorded.effects.get()
    Effect.objects.filter(pk=effect.pk).update(state=Effect.State.UNKNOWN, result=None)
    return Effect.objects.get(pk=effect.pk)


def client_for(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client
