"""The crash matrix (durableruns.testing.crashtest, what `manage.py crashtest` runs)
against the two execution paths the demo agents do not take: the README's
tool-calling agent driven over real HTTP by the OpenAI-compatible stand-in model
(`tool_calls` + `usage`), and a LangGraph graph whose node sends an e-mail. Real
Celery workers are SIGKILLed at each crash point and another resumes the run; the
same judge counts what the providers and the model really executed.

The crash points chosen (CI time; the full matrix of the native path is
test_crash_matrix.py):
- tool-calling agent: after_step_commit at every step (each model turn's tool calls
  and each tool result just recorded: the replay must return the same tool calls and
  rebuild the same messages, or the next turn diverges or is asked again);
  after_tool_returned at both writes (refund and e-mail done, nothing recorded: the
  re-send carries the same key); after_run_finished. The ledger's own points
  (after_effect_started, during_result_commit, before_step) are the native path's and
  are covered there.
- graph: every point a graph has (durableruns/langgraph/crashes.py): before_step and
  after_step_commit of each node, after_tool_returned of the node that sends (LangGraph
  runs it again: the provider deduplicates by `idempotency_key`), after_run_finished.
"""

from __future__ import annotations

import sys

import pytest
from django.core.management import call_command
from django.test import override_settings

import tests.agents_toolcalling  # noqa: F401 - registers support-bot here; workers import it
from durableruns.engine import crashpoints
from durableruns.models import Run, Step
from durableruns.testing import crashtest
from durableruns.testing.crashtest.graphs import GraphCrashTest

# The django_db mark makes pytest-django create the test database even when only this
# file runs (as test_crash_matrix.py): without it the matrix, which ends in `flush`,
# ran against DATABASE_URL's own database, the developer's.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600), pytest.mark.django_db]

QUESTION = {"question": "Where is my refund for order A-1001?"}
MAIL = {"order": "A-1001", "to": "ada@example.com"}
TOOL_CALLING_POINTS = (
    crashpoints.AFTER_STEP_COMMIT,
    crashpoints.AFTER_TOOL_RETURNED,
    crashpoints.AFTER_RUN_FINISHED,
)
OPTIONS = crashtest.Options(
    workers=3, pool="prefork", parallel=8, lease_ttl=1.5, sweep_interval=0.5, stand_in_model=True
)


@pytest.fixture(scope="module")
def matrix(django_db_setup, django_db_blocker):
    """Both matrices, run once on one set of workers; the database is flushed afterwards."""
    cluster_settings = override_settings(
        DURABLERUNS_PROVIDER_URL="http://127.0.0.1:9",  # crashtest serves the providers
        DURABLERUNS_AGENT_MODULES=["durableruns.demo.agents", "tests.agents_toolcalling"],
        DURABLERUNS_LANGGRAPH_GRAPHS=["crash-mail=tests.chaos.langgraph_mail:mail_graph"],
    )
    with django_db_blocker.unblock(), cluster_settings:
        try:
            tests = [
                crashtest.CrashTest("support-bot", QUESTION, TOOL_CALLING_POINTS),
                GraphCrashTest("crash-mail", MAIL),
            ]
            reports = crashtest.run_many(tests, OPTIONS, progress=sys.stderr)
            for report in reports:
                report.write(sys.stdout)
            yield {report.agent: report for report in reports}
        finally:
            call_command("flush", interactive=False, verbosity=0)


def _expected_cases(report) -> set[tuple[str, str]]:
    return {(case.point, case.step) for case in report.cases}


def _why(case) -> str:
    """What a failing case's run says about itself: a diverged run is diagnosed from
    this line alone (the workers' logs are gone with the test's cluster)."""
    run = Run.objects.get(pk=case.run_id)
    steps = list(run.steps.order_by("position").values_list("step_id", "error"))
    return f"{case.run_id}: {run.status}, error {run.error}, steps {steps}"


def test_it_kills_the_tool_calling_agent_at_the_chosen_points(matrix):
    report = matrix["support-bot"]
    steps = list(report.baseline.steps.order_by("position").values_list("step_id", flat=True))
    assert steps == ["0-turn-0", "1-lookup_order", "2-refund", "3-send_email", "4-turn-1"]
    assert _expected_cases(report) == {
        *((crashpoints.AFTER_STEP_COMMIT, step) for step in steps),
        (crashpoints.AFTER_TOOL_RETURNED, "2-refund"),
        (crashpoints.AFTER_TOOL_RETURNED, "3-send_email"),
        (crashpoints.AFTER_RUN_FINISHED, "(run)"),
    }


def test_it_kills_the_graph_at_every_boundary_of_its_nodes(matrix):
    report = matrix["crash-mail"]
    assert _expected_cases(report) == {
        (crashpoints.BEFORE_STEP, "2-send_email"),
        (crashpoints.BEFORE_STEP, "3-log_sent"),
        (crashpoints.AFTER_STEP_COMMIT, "1-write_email"),
        (crashpoints.AFTER_STEP_COMMIT, "2-send_email"),
        (crashpoints.AFTER_STEP_COMMIT, "3-log_sent"),
        (crashpoints.AFTER_TOOL_RETURNED, "2-send_email"),
        (crashpoints.AFTER_RUN_FINISHED, "(run)"),
    }
    assert report.baseline_executions == {"2-send_email:send_email": 1}
    assert not report.warnings


def test_every_crash_fired_in_a_different_process(matrix):
    cases = [case for report in matrix.values() for case in report.cases]
    killed = [case.killed_pid for case in cases]
    assert None not in killed and len(set(killed)) == len(killed)


def test_nothing_executes_twice_and_nothing_is_lost(matrix):
    for name, report in matrix.items():
        assert (name, report.duplicates, report.lost) == (name, 0, 0)
        for case in report.cases:
            assert case.executions == report.baseline_executions, _why(case)


def test_every_tool_calling_run_is_resumed_and_finishes_like_the_uninterrupted_one(matrix):
    report = matrix["support-bot"]
    assert report.baseline.status == Run.Status.SUCCEEDED
    for case in report.cases:
        expected = (
            crashtest.FINISHED
            if case.point == crashpoints.AFTER_RUN_FINISHED
            else crashtest.RESUMED
        )
        assert (case.run_id, case.outcome) == (case.run_id, expected), _why(case)


def test_every_thread_finishes_like_the_uninterrupted_one(matrix):
    report = matrix["crash-mail"]
    assert report.baseline.status == Run.Status.SUCCEEDED
    for case in report.cases:
        # Same final state (else "diverged"). LangGraph stores checkpoints in the
        # background, so a crash at the last node may come after the final checkpoint
        # already finished the thread: nothing left to resume.
        assert case.outcome in (crashtest.RESUMED, crashtest.FINISHED), case.run_id
        # Killed around the send: another worker went on. Except after its writes were
        # stored: those are stored in the background while the next node runs, so the
        # thread may have finished before the crash (CI saw it under load).
        if case.step == "2-send_email" and case.point != crashpoints.AFTER_STEP_COMMIT:
            assert (case.point, case.outcome) == (case.point, crashtest.RESUMED)


def test_a_resumed_tool_calling_run_replays_the_same_tool_calls_and_spend(matrix):
    report = matrix["support-bot"]

    def turns(run_id: str) -> list:
        steps = Step.objects.filter(run_id=run_id, kind=Step.Kind.LLM).order_by("position")
        return [(s.result["tool_calls"], s.result["usage"]) for s in steps]

    baseline = Run.objects.get(pk=report.baseline.pk)
    assert turns(baseline.pk)[0][0]  # the first turn asked for tools
    for case in report.cases:
        run = Run.objects.get(pk=case.run_id)
        assert turns(run.pk) == turns(baseline.pk), _why(case)
        assert (run.tokens_in, run.tokens_out, run.cost) == (
            baseline.tokens_in,
            baseline.tokens_out,
            baseline.cost,
        )
