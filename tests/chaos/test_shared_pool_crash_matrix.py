"""The crash matrix on the documented worker (README "Sizing workers": `--pool=threads`
on a pool of Postgres sessions) and on its opt-in gevent pool.

Runs share a worker process there, so the SIGKILL at each crash point also kills every
other run in flight on that worker, wherever it was: inside a write, between two
statements on a pooled session, in the middle of a commit. The demo refund agent runs
against providers that deduplicate by key (on threads) and against providers that can
be asked whether a write happened (on gevent): with either, a write cut anywhere is
safe to finish, so every run must end like the uninterrupted run, none escalated,
nothing executed twice, nothing lost. (Providers that can do neither escalate a write
cut mid-way, as they should; the prefork matrix, test_crash_matrix.py, where a crash
cuts one run at one known point, checks those escalations exactly.)
"""

from __future__ import annotations

import sys

import pytest
from django.core.management import call_command
from django.test import override_settings

from durableruns.engine import crashpoints
from durableruns.models import Run
from durableruns.testing import crashtest

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600), pytest.mark.django_db]

# Each pool against one of the two providers (a crash restarts a whole worker, about a
# CPU-second on CI's two cores): every point is killed on both pools.
MATRICES = {"threads": "dedupe", "gevent": "lookup"}


@pytest.fixture(scope="module", params=sorted(MATRICES))
def matrix(request, django_db_setup, django_db_blocker):
    options = crashtest.Options(
        workers=2, pool=request.param, parallel=8, lease_ttl=1.5, sweep_interval=0.5
    )
    behaviour = MATRICES[request.param]
    test = crashtest.CrashTest(
        "refund-bot", {"order_id": "A-1001", "payments": behaviour, "email": behaviour}
    )
    unreachable = override_settings(DURABLERUNS_PROVIDER_URL="http://127.0.0.1:9")
    with django_db_blocker.unblock(), unreachable:
        try:
            reports = crashtest.run_many([test], options, progress=sys.stderr)
            for report in reports:
                report.write(sys.stdout)
            yield options, reports
        finally:
            call_command("flush", interactive=False, verbosity=0)


def _cases(matrix):
    return [case for report in matrix[1] for case in report.cases]


def test_its_workers_run_their_share_of_the_runs_on_a_pool_of_sessions(matrix):
    options, reports = matrix
    assert options.concurrency == 4
    for report in reports:
        writes = report.baseline.effects.count()
        assert len(report.cases) == 2 * report.baseline.steps.count() + 3 * writes + 1
        assert not report.warnings


def test_every_run_was_killed_at_its_point_or_by_another_runs_crash(matrix):
    cases = _cases(matrix)
    fired = [case for case in cases if case.outcome != crashtest.KILLED_ELSEWHERE]
    killed = [case.killed_pid for case in fired]
    assert None not in killed and len(set(killed)) == len(killed)
    # The others were killed by another run's crash first, past their own point (a
    # step already recorded, a write a lookup then found done): how many is timing.
    assert matrix[1][0].worker_restarts >= len(fired)


def test_it_never_executes_an_effect_or_a_model_call_twice(matrix):
    assert [(case.run_id, case.extra) for case in _cases(matrix) if case.duplicates] == []


def test_every_run_finishes_like_the_uninterrupted_run(matrix):
    expected = {crashtest.RESUMED, crashtest.FINISHED, crashtest.KILLED_ELSEWHERE}
    assert {
        case.run_id: case.outcome for case in _cases(matrix) if case.outcome not in expected
    } == {}
    assert all(
        case.outcome == crashtest.FINISHED
        for case in _cases(matrix)
        if case.point == crashpoints.AFTER_RUN_FINISHED and case.fired_at is not None
    )
    assert not Run.objects.filter(status=Run.Status.ESCALATED).exists()
