"""One rule says which runs an operator may resume (issue 25): `services.runs.is_resumable`
over a run's status and its effects' states. The SQL form (`resumable()`, which the resume
action and the bulk action filter by) and the run page's Resume button must agree with it
in every combination, so neither can drift from the other."""

from __future__ import annotations

import itertools

import pytest
from django.urls import reverse
from django.utils import timezone

from durableruns.models import Effect, Run
from durableruns.services.runs import is_resumable, resumable
from tests.web.dashboard import make_effect, make_run, make_step

pytestmark = pytest.mark.django_db

State = Effect.State
EFFECTS = [
    (),
    (State.SUCCEEDED,),
    (State.UNKNOWN,),
    (State.RESOLVED, State.UNKNOWN),
    (State.RESOLVED,),
]


def _run(n: int, status: str, states: tuple[str, ...], redacted: bool) -> Run:
    run = make_run(f"r-{n}", status=status, redacted_at=timezone.now() if redacted else None)
    make_step(run, 0)
    for position, state in enumerate(states, start=1):
        make_effect(run, position, state=state)
    return run


def test_the_query_follows_the_one_rule_in_every_combination():
    cases = itertools.product(Run.Status.values, EFFECTS, [False, True])
    for n, (status, states, redacted) in enumerate(cases):
        run = _run(n, status, states, redacted)
        expected = is_resumable(status, states, redacted=redacted)
        found = Run.objects.filter(resumable(), pk=run.pk).exists()
        assert found == expected, f"{status}, effects {states}, redacted={redacted}"


def test_the_run_page_offers_resume_by_the_one_rule(client, bob):
    """Each status, and each effect mix for the one status effects decide (a page render
    costs more than a query, so not the whole product)."""
    client.force_login(bob)
    cases = [(status, (), False) for status in Run.Status.values]
    cases += [(Run.Status.ESCALATED, states, False) for states in EFFECTS]
    cases += [(Run.Status.FAILED, (), True), (Run.Status.ESCALATED, (State.RESOLVED,), True)]
    for n, (status, states, redacted) in enumerate(cases):
        run = _run(n, status, states, redacted)
        body = client.get(reverse("run", args=[run.id])).content.decode()
        expected = is_resumable(status, states, redacted=redacted)
        assert ("Resume run" in body) == expected, f"{status}, effects {states}, {redacted=}"


def test_the_rule_reads_status_and_unknown_effects():
    assert is_resumable(Run.Status.FAILED, [], redacted=False)
    assert is_resumable(Run.Status.WAITING, [State.UNKNOWN], redacted=False)
    assert not is_resumable(Run.Status.FAILED, [], redacted=True)
    assert is_resumable(Run.Status.ESCALATED, [State.RESOLVED], redacted=False)
    assert not is_resumable(Run.Status.ESCALATED, [State.RESOLVED, State.UNKNOWN], redacted=False)
    assert not is_resumable(Run.Status.SUCCEEDED, [], redacted=False)
