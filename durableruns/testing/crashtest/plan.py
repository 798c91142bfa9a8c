"""The crash matrix: one case per crash point and step position, and what can become of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from durableruns.engine import crashpoints
from durableruns.engine.errors import UsageError
from durableruns.models import Effect, Run, Step

# Outcomes of one crashed run. The first two are what a correct engine produces.
RESUMED = "resumed"  # killed, resumed by another worker, finished like the baseline
FINISHED = "finished"  # killed after the run had finished: nothing left to resume
ESCALATED = "escalated"  # an unsafe write's outcome is unknown: held for a human
LOST = "lost"  # neither finished nor escalated in time
DIVERGED = "diverged"  # finished with another status or result than the baseline
NOT_REACHED = "not reached"  # the armed crash never fired: this cell tested nothing
# Shared pools only: another run's crash killed the process executing it, before its
# own point (judge._killed_while_executing), and it finished like the baseline.
KILLED_ELSEWHERE = "killed elsewhere"
FAILURES = frozenset({LOST, DIVERGED, NOT_REACHED})


@dataclass
class Case:
    point: str
    position: int
    step: str  # the step id ("2-refund"), or "(run)" for a run-level point
    run_id: str
    started: float = 0.0
    fired_at: float | None = None
    killed_pid: int | None = None
    fence_at_fire: int | None = None
    rung_at: float | None = None  # the sweeper saw the expired lease and rang the run
    resumed_at: float | None = None
    done_at: float | None = None
    status: str = ""
    outcome: str = ""
    duplicates: int = 0
    missing: int = 0
    escalations: int = 0
    extra: dict[str, int] = field(default_factory=dict)
    # Same-key re-sends beyond the baseline's that the provider deduplicated (the
    # counter says so, judge.Executions): no second effect, so not duplicates.
    deduplicated: dict[str, int] = field(default_factory=dict)
    # Model calls a crash cut before their answer was recorded, asked again on resume
    # (judge.Executions): the price of the crash, not duplicates.
    cut: dict[str, int] = field(default_factory=dict)
    executions: Counter = field(default_factory=Counter)  # per "step_id:tool"

    @property
    def resume_seconds(self) -> float | None:
        """SIGKILL to another worker holding the run's lease."""
        if self.fired_at is None or self.resumed_at is None:
            return None
        return max(self.resumed_at - self.fired_at, 0.0)

    @property
    def detect_seconds(self) -> float | None:
        """SIGKILL to the sweeper ringing the run again (lease expiry + sweep interval)."""
        if self.fired_at is None or self.rung_at is None or self.resumed_at is None:
            return None
        return max(self.rung_at - self.fired_at, 0.0)

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES or self.duplicates > 0


def check_points(points: Collection[str]) -> None:
    unknown = sorted(set(points) - set(crashpoints.PLANNED))
    if unknown or not points:
        raise UsageError(
            f"unknown crash point(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(crashpoints.PLANNED)}"
        )


def plan_cases(
    baseline: Run, session: str, points: Collection[str] = crashpoints.PLANNED
) -> list[Case]:
    """One case per crash point and step position it applies to, plus the run-level points
    and, at each step that waits for a child run, the point between the two; only
    `points` (a subset of crashpoints.PLANNED) when given."""
    check_points(points)
    effects = set(Effect.objects.filter(run=baseline).values_list("position", flat=True))
    steps = list(Step.objects.filter(run=baseline).order_by("position"))
    cases = []
    for point in (p for p in crashpoints.ALL if p in points):
        if point in crashpoints.RUN_LEVEL:
            cases.append(Case(point, crashpoints.RUN_POSITION, "(run)", f"ct-{session}-{point}"))
            continue
        for step in steps:
            later_branch = step.fan_out is not None and step.fan_out < step.position
            if crashpoints.applies(
                point, has_effect=step.position in effects, later_branch=later_branch
            ):
                cases.append(
                    Case(
                        point, step.position, step.step_id, f"ct-{session}-{point}-{step.position}"
                    )
                )
    # Between a child run's end and its parent's wake: armed on the parent at the step
    # that waits for the child, fired by the child's executor.
    for point in (p for p in crashpoints.CHILD_ONLY if p in points):
        for step in steps:
            if step.kind == Step.Kind.CHILD:
                run_id = f"ct-{session}-{point}-{step.position}"
                cases.append(Case(point, step.position, step.step_id, run_id))
    return cases
