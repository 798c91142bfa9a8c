"""The full crash matrix, through the product's own `crashtest` module.

Both demo agents, against all three provider behaviours, each killed (SIGKILL,
real Celery worker processes, real Postgres and Redis) once at every crash point
of every step it applies to, then resumed by another worker after its lease
expired. The matrix runs once for the module (its runs in parallel on several
workers); each test asserts one guarantee over all of it.
"""

from __future__ import annotations

import sys

import pytest
from django.core.management import call_command
from django.test import override_settings

from durableruns.engine import crashpoints
from durableruns.testing import crashtest

# The matrix runs in the first test's setup: give it room on a busy machine. The
# django_db mark makes pytest-django create the test database even when only this file
# runs: without a marked test it sets none up, and the matrix (which ends in `flush`)
# ran against DATABASE_URL's own database.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600), pytest.mark.django_db]

BEHAVIOURS = ("dedupe", "lookup", "none")
AGENT_INPUTS = [
    *(("refund-bot", {"order_id": "A-1001", "payments": b, "email": b}) for b in BEHAVIOURS),
    *(("research-bot", {"topic": "durable agents", "email": b}) for b in BEHAVIOURS),
]
# prefork: each crash kills the process executing the run and Celery forks a new one
# at once; a whole-worker restart per crash (solo) would cost a CPU-second each.
OPTIONS = crashtest.Options(
    workers=4, pool="prefork", parallel=12, lease_ttl=1.5, sweep_interval=0.5
)


def _behaviour(report: crashtest.Report) -> str:
    return report.run_input["email"]


@pytest.fixture(scope="module")
def matrix(django_db_setup, django_db_blocker):
    """Every crash matrix, run once; the database is flushed afterwards."""
    tests = [crashtest.CrashTest(agent, run_input) for agent, run_input in AGENT_INPUTS]
    # An unreachable provider URL: crashtest serves the providers itself, on the test database.
    unreachable = override_settings(DURABLERUNS_PROVIDER_URL="http://127.0.0.1:9")
    with django_db_blocker.unblock(), unreachable:
        try:
            reports = crashtest.run_many(tests, OPTIONS, progress=sys.stderr)
            for report in reports:
                report.write(sys.stdout)
            sys.stdout.write(_overall(reports))
            yield reports
        finally:
            call_command("flush", interactive=False, verbosity=0)


def _overall(reports) -> str:
    """The figures over the whole matrix (printed with -s, for the closing note)."""
    merged = crashtest.Report(
        "all",
        {},
        OPTIONS,
        "",
        reports[0].baseline,
        reports[0].baseline_executions,
        [c for r in reports for c in r.cases],
        0,
        reports[0].seconds,
    )
    by_behaviour = {b: sum(r.escalated for r in reports if _behaviour(r) == b) for b in BEHAVIOURS}
    return (
        f"\nMATRIX: {len(merged.cases)} crashed runs (+{len(reports)} baselines) in "
        f"{reports[0].seconds:.1f}s; {merged.duplicates} duplicates, {merged.lost} lost; "
        f"escalations by provider behaviour {by_behaviour}\n"
        f"{crashtest.resume_summary(merged)}\n"
    )


def _cases(matrix):
    return [(report, case) for report in matrix for case in report.cases]


def test_it_kills_both_agents_at_every_crash_point_of_every_step(matrix):
    assert {(r.agent, _behaviour(r)) for r in matrix} == {
        (agent, run_input["email"]) for agent, run_input in AGENT_INPUTS
    }
    for report in matrix:
        steps = report.baseline.steps.count()
        writes = report.baseline.effects.count()
        assert writes >= 1
        # before_step and after_step_commit at every step, the three effect points at
        # every write, after_run_finished once.
        assert len(report.cases) == 2 * steps + 3 * writes + 1
        assert {case.point for case in report.cases} == set(crashpoints.ALL) - set(
            crashpoints.FAN_OUT_ONLY
        )
    # Every crash fired, each in (and killing) a different process.
    killed = [case.killed_pid for _, case in _cases(matrix)]
    assert None not in killed and len(set(killed)) == len(killed)


def test_it_counts_the_baseline_executions_it_compares_against(matrix):
    for report in matrix:
        writes = [f"{e.position}-{e.tool}:{e.tool}" for e in report.baseline.effects.all()]
        assert writes and all(report.baseline_executions[key] == 1 for key in writes)
        assert not report.warnings


def test_it_never_executes_an_effect_or_a_model_call_twice(matrix):
    duplicated = [(case.run_id, case.extra) for _, case in _cases(matrix) if case.duplicates]
    assert duplicated == []


def test_it_loses_no_run(matrix):
    lost = [case.run_id for _, case in _cases(matrix) if case.outcome == crashtest.LOST]
    assert lost == []


def test_it_escalates_only_unknown_outcomes_at_providers_that_cannot_dedupe_or_look_up(matrix):
    escalated = {
        (r.agent, _behaviour(r), c.point, c.position)
        for r, c in _cases(matrix)
        if c.outcome == crashtest.ESCALATED
    }
    expected = {
        (r.agent, _behaviour(r), c.point, c.position)
        for r, c in _cases(matrix)
        if _behaviour(r) == "none" and c.point in crashpoints.EFFECT_ONLY
    }
    assert expected and escalated == expected
    assert all(c.escalations == (c.outcome == crashtest.ESCALATED) for _, c in _cases(matrix))


def test_it_escalates_a_write_executed_once_or_not_at_all_as_the_crash_left_it(matrix):
    for report, case in _cases(matrix):
        if case.outcome != crashtest.ESCALATED:
            continue
        key = f"{case.step}:{case.step.split('-', 1)[1]}"
        executed = 0 if case.point == crashpoints.AFTER_EFFECT_STARTED else 1
        assert report.baseline_executions[key] == 1
        assert case.executions[key] == executed, case.run_id


def test_it_finishes_every_other_run_like_the_uninterrupted_run(matrix):
    for report, case in _cases(matrix):
        if case.outcome == crashtest.ESCALATED:
            continue
        assert report.baseline.status == "succeeded"
        expected = (
            crashtest.FINISHED
            if case.point == crashpoints.AFTER_RUN_FINISHED
            else crashtest.RESUMED
        )
        assert (case.run_id, case.outcome) == (case.run_id, expected)


def test_it_rings_a_killed_run_within_lease_ttl_plus_sweep_interval(matrix):
    detected = [t for report in matrix for t in report.detect_times()]
    resumed = [c for _, c in _cases(matrix) if c.point != crashpoints.AFTER_RUN_FINISHED]
    # Invariant 7: the lease expires at most one TTL after the last heartbeat and the
    # next sweep rings the run; the margin is for a sweep query on a busy machine.
    bound = OPTIONS.lease_ttl + OPTIONS.sweep_interval + 2.0
    assert max(detected) < bound, crashtest.resume_summary(matrix[0])
    # A doorbell the broker redelivered (the killed task's message is requeued) can
    # hand the run to a worker right as its lease expires, before the sweep rings it:
    # such a run was taken over without the sweeper. Most must show the sweeper's ring.
    unrung = [c.run_id for c in resumed if c.detect_seconds is None]
    assert len(unrung) <= len(resumed) // 10, unrung


def test_it_resumes_a_killed_run_in_seconds_not_the_brokers_hour(matrix):
    times = [t for report in matrix for t in report.resume_times()]
    assert len(times) == sum(c.point != crashpoints.AFTER_RUN_FINISHED for _, c in _cases(matrix))
    # Ringing plus waiting for a free worker, on a busy 2-core machine.
    assert max(times) < 30, crashtest.resume_summary(matrix[0])
