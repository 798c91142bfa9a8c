"""crashtest: prove an agent survives a SIGKILL at every boundary without doing anything twice.

The agent runs once uninterrupted (the baseline), then once per (crash point x step
position that point applies to) with that crash armed. Real Celery worker
processes execute the runs; an armed worker kills itself with SIGKILL at the
point, a small supervisor starts a fresh worker in its place, and a sweeper rings
the run again once its lease expired, so another worker resumes it from its last
checkpoint. Then, for every crashed run, crashtest compares what the external
providers really executed and what the model really produced with the baseline,
per step and tool (arguments may embed run-specific ids, so keys are compared
without their argument fingerprint), and the run's final result with the
baseline's (modulo run-specific ids).

A run is *lost* when it neither finished nor escalated to a human in time; a
*duplicate* is any execution beyond the baseline's count at the same step. Both
make the command fail. What counts as "really executed" comes from an execution
counter: by default the demo stand-in providers and the scripted model, which
record every execution; point `DURABLERUNS_CRASHTEST_COUNTER` at a function
`(run_id) -> Counter[str]` to count what your own (sandbox) providers executed.

LangGraph graphs: `graphs.GraphCrashTest` (needs the `langgraph` extra, so it is not
imported here).
"""

from __future__ import annotations

from .cluster import POOLS, SHARED_POOLS, Cluster, CrashTestError, Options
from .judge import Executions, comparable, demo_executions
from .plan import (
    DIVERGED,
    ESCALATED,
    FAILURES,
    FINISHED,
    KILLED_ELSEWHERE,
    LOST,
    NOT_REACHED,
    RESUMED,
    Case,
    plan_cases,
)
from .report import Report, resume_summary
from .runner import CrashTest, run, run_many

__all__ = [
    "DIVERGED",
    "ESCALATED",
    "FAILURES",
    "FINISHED",
    "KILLED_ELSEWHERE",
    "LOST",
    "NOT_REACHED",
    "POOLS",
    "RESUMED",
    "SHARED_POOLS",
    "Case",
    "Cluster",
    "CrashTest",
    "CrashTestError",
    "Executions",
    "Options",
    "Report",
    "comparable",
    "demo_executions",
    "plan_cases",
    "resume_summary",
    "run",
    "run_many",
]
