"""Running crash matrices: the baselines, then every crashed run, watched and judged."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TextIO

from durableruns.engine import crashpoints, registry
from durableruns.engine.runs import start_run
from durableruns.models import Run

from .cluster import POLL_SECONDS, Cluster, CrashTestError, Options
from .judge import DONE, counter_warnings, execution_counter, judge
from .plan import Case, check_points, plan_cases
from .report import Report

# A run-level crash fires just after the run's final commit; give it this long to show.
FIRE_GRACE_SECONDS = 1.0


class CrashTest:
    """One agent and input to test: a baseline run and its matrix of crashed runs."""

    def __init__(
        self, agent: str, run_input: dict[str, Any], points: Collection[str] = crashpoints.PLANNED
    ) -> None:
        self.agent = registry.get_agent(agent)  # UnknownAgent: a clear error, nothing started
        self.run_input = run_input
        check_points(points)  # before anything starts
        self.points = points
        self.session = uuid.uuid4().hex[:6]
        self.baseline: Run | None = None
        self.cases: list[Case] = []

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def title(self) -> str:
        return f"{self.agent.name}@{self.agent.version}"

    @property
    def baseline_id(self) -> str:
        return f"ct-{self.session}-baseline"

    def start(self, case: Case | None = None) -> None:
        run_id = case.run_id if case else self.baseline_id
        start_run(self.agent.name, self.run_input, run_id=run_id, version=self.agent.version)

    def plan(self) -> list[Case]:
        assert self.baseline is not None
        return plan_cases(self.baseline, self.session, self.points)

    def report(
        self,
        options: Options,
        cluster: Cluster,
        count: Callable[[str], Counter],
        seconds: float,
        kills: Mapping[int, float],
    ) -> Report:
        """`kills`: when each crash killed its process (pid: time.time())."""
        assert self.baseline is not None
        base_counts = count(self.baseline.id)
        for case in self.cases:
            judge(case, self.baseline, base_counts, count(case.run_id), options, kills)
        return Report(
            self.name,
            self.run_input,
            options,
            cluster.provider_url,
            self.baseline,
            base_counts,
            self.cases,
            cluster.restarts,
            seconds,
            counter_warnings(self.baseline, base_counts),
        )


def run(
    agent: str,
    run_input: dict[str, Any],
    options: Options | None = None,
    *,
    progress: TextIO | None = None,
    points: Collection[str] = crashpoints.PLANNED,
) -> Report:
    """The crash matrix of one agent and input (what `manage.py crashtest` does)."""
    return run_many([CrashTest(agent, run_input, points)], options, progress=progress)[0]


def run_many(
    tests: list[CrashTest], options: Options | None = None, *, progress: TextIO | None = None
) -> list[Report]:
    """Several crash matrices sharing one set of workers, their runs interleaved."""
    options = options or Options()
    say = _speaker(progress)
    count = execution_counter()
    began = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="crashtest-"))
    with Cluster(options, work_dir) as cluster:
        say(_settings_line(tests, options, cluster))
        _run_baselines(tests, options, cluster)
        cases = []
        for test in tests:
            test.cases = test.plan()
            cases += [(test, case) for case in test.cases]
            say(
                f"baseline {test.baseline.id}: {test.baseline.status}; "
                f"{len(test.cases)} crash points to test"
            )
        say(f"running {len(cases)} crashed runs, {options.in_flight} at a time")
        Scheduler(options, cluster, say).execute(cases)
        seconds = time.monotonic() - began
        kills = {c.killed_pid: c.fired_at for _, c in cases if c.killed_pid and c.fired_at}
        reports = [test.report(options, cluster, count, seconds, kills) for test in tests]
    if all(report.ok for report in reports):
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        say(f"worker and provider logs kept in {work_dir}")
    return reports


def _speaker(progress: TextIO | None) -> Callable[[str], None]:
    def say(line: str) -> None:
        if progress is not None:
            progress.write(line + "\n")
            progress.flush()

    return say


def _run_baselines(tests: list[CrashTest], options: Options, cluster: Cluster) -> None:
    for test in tests:
        test.start()
    deadline = time.monotonic() + options.run_timeout
    pending = {t.baseline_id: t for t in tests}
    while pending:
        for run in Run.objects.filter(pk__in=list(pending)):
            if run.status in (Run.Status.ESCALATED, Run.Status.AWAITING_APPROVAL):
                raise CrashTestError(
                    f"the uninterrupted run {run.id} stopped as {run.status}: crashtest needs "
                    "an input with which the agent finishes on its own"
                )
            if run.status in (Run.Status.FAILED, Run.Status.CANCELLED):
                raise CrashTestError(
                    f"the uninterrupted run {run.id} {run.status}{_reason(run)}: crashtest "
                    "needs an input with which the agent finishes on its own"
                )
            if run.is_terminal:
                pending.pop(run.id).baseline = run
        if pending and time.monotonic() > deadline:
            raise CrashTestError(
                f"the uninterrupted run(s) {', '.join(pending)} did not finish in "
                f"{options.run_timeout:.0f}s (can a worker reach the database and "
                f"{cluster.provider_url}?)"
            )
        time.sleep(POLL_SECONDS * 5)


def _reason(run: Run) -> str:
    message = (run.error or {}).get("message") if isinstance(run.error, dict) else None
    return f" ({message})" if message else ""


class Scheduler:
    """Keeps `in_flight` crashed runs going and watches each one's crash and resume."""

    def __init__(self, options: Options, cluster: Cluster, say: Callable[[str], None]) -> None:
        self.options, self.cluster, self.say = options, cluster, say

    def execute(self, cases: list[tuple[CrashTest, Case]]) -> None:
        waiting = list(reversed(cases))
        active: dict[str, Case] = {}
        while waiting or active:
            while waiting and len(active) < self.options.in_flight:
                test, case = waiting.pop()
                crashpoints.arm(self.cluster.crash_dir, case.run_id, case.point, case.position)
                case.started = time.time()
                test.start(case)
                active[case.run_id] = case
            self._observe(active)
            time.sleep(POLL_SECONDS)

    def _observe(self, active: dict[str, Case]) -> None:
        now = time.time()
        rows = Run.objects.filter(pk__in=list(active)).values_list(
            "id", "status", "fence", "rang_at"
        )
        for run_id, status, fence, rang_at in rows:
            case = active[run_id]
            case.status = status
            if case.fired_at is None:
                record = crashpoints.fired(self.cluster.crash_dir, run_id)
                if record is not None:
                    # The killed execution's fence, from the record: this look may come
                    # after another worker took the run over, or even finished it.
                    # (Points that cannot know it: the row's, whose dead lease stays
                    # until another worker takes over.)
                    fired_fence = record.get("fence")
                    case.fired_at = record["at"]
                    case.fence_at_fire = fence if fired_fence is None else fired_fence
                    case.killed_pid = record["pid"]
            if case.fired_at is not None and case.resumed_at is None:
                if rang_at is not None and rang_at.timestamp() > case.fired_at:
                    case.rung_at = case.rung_at or rang_at.timestamp()  # database time
                if fence > case.fence_at_fire:
                    case.resumed_at = now
            if self._finished(case, status, now):
                del active[run_id]
                self.say(f"  {run_id}: {status}")

    def _finished(self, case: Case, status: str, now: float) -> bool:
        if status in DONE:
            case.done_at = case.done_at or now
            if case.fired_at is not None:
                return True
            if not crashpoints.is_armed(self.cluster.crash_dir, case.run_id):
                return False  # fired just now: the record shows on the next look
            return now - case.done_at > FIRE_GRACE_SECONDS
        return now - case.started > self.options.run_timeout


def _settings_line(tests: list[CrashTest], options: Options, cluster: Cluster) -> str:
    server = "started by crashtest" if cluster.started_server else "already running"
    lines = [f"crashtest {t.title} input {json.dumps(t.run_input, sort_keys=True)}" for t in tests]
    return "\n".join(
        [
            *lines,
            f"  {options.workers} {options.pool} workers (restarted when they die), lease TTL "
            f"{options.lease_ttl:g}s, sweep interval {options.sweep_interval:g}s, "
            f"providers at {cluster.provider_url} ({server})",
        ]
    )
