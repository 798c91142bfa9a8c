"""crashtest for a LangGraph graph: its threads executed by real workers, killed at
the saver's boundaries (durableruns/langgraph/crashes.py), judged like native runs.

A thread starts as a run does: its input stored as the first checkpoint (nothing
executed in this process), then the doorbell hands it to a worker, which continues
the graph from there (langgraph/resume.py). Cases: each node that wrote, killed after
its writes were stored (AFTER_STEP_COMMIT) and after the checkpoint that schedules it
(BEFORE_STEP); each node with a side effect seen by the execution counter also killed
after it returned, before its writes were stored (AFTER_TOOL_RETURNED: LangGraph runs
the node again, so the effect must carry `durableruns.langgraph.idempotency_key`);
and once after the thread finished. The ledger's points (AFTER_EFFECT_STARTED,
DURING_RESULT_COMMIT) do not exist in a graph.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from django.db import transaction

from durableruns.engine import crashpoints, doorbell
from durableruns.langgraph.render import node_of
from durableruns.langgraph.resume import load_graph
from durableruns.langgraph.store import run_id_for
from durableruns.models import LangGraphCheckpoint, LangGraphWrite, Run

from .judge import execution_counter
from .plan import Case, check_points
from .runner import CrashTest

POINTS = (
    crashpoints.BEFORE_STEP,
    crashpoints.AFTER_TOOL_RETURNED,
    crashpoints.AFTER_STEP_COMMIT,
    crashpoints.AFTER_RUN_FINISHED,
)


class GraphCrashTest(CrashTest):
    """A graph registered in DURABLERUNS_LANGGRAPH_GRAPHS and its input."""

    def __init__(
        self,
        graph: str,
        run_input: dict[str, Any],
        points: Collection[str] = POINTS,
    ) -> None:
        check_points(points)
        self.graph = graph
        load_graph(graph)  # UnknownGraph: a clear error, nothing started
        self.run_input = run_input
        self.points = [p for p in points if p in POINTS]
        self.session = uuid.uuid4().hex[:6]
        self.baseline: Run | None = None
        self.cases: list[Case] = []

    @property
    def name(self) -> str:
        return self.graph

    @property
    def title(self) -> str:
        return f"LangGraph graph {self.graph}"

    @property
    def baseline_id(self) -> str:
        return run_id_for(self._thread())

    def _thread(self, case: Case | None = None) -> str:
        return f"ct-{self.session}-" + (
            f"{case.point}-{case.position}" if case is not None else "baseline"
        )

    def start(self, case: Case | None = None) -> None:
        config = {"configurable": {"thread_id": self._thread(case)}}
        load_graph(self.graph).update_state(config, self.run_input, as_node="__start__")
        with transaction.atomic():
            doorbell.ring(run_id_for(self._thread(case)))

    def plan(self) -> list[Case]:
        assert self.baseline is not None
        steps = _node_steps(self.baseline.pk)
        counted = execution_counter()(self.baseline.pk)
        with_effect = {key.split(":", 1)[0] for key, n in counted.items() if n}
        first = min((step for step, _ in steps), default=0)
        cases = []
        for point in self.points:
            if point in crashpoints.RUN_LEVEL:
                case = Case(point, crashpoints.RUN_POSITION, "(run)", "")
                cases.append(case)
                continue
            for step, node in steps:
                step_id = f"{step}-{node}"
                if point == crashpoints.AFTER_TOOL_RETURNED and step_id not in with_effect:
                    continue
                if point == crashpoints.BEFORE_STEP and step == first:
                    continue  # start() stored the checkpoint that schedules it, not a worker
                cases.append(Case(point, step, step_id, ""))
        for case in cases:
            case.run_id = run_id_for(self._thread(case))
        return cases


def _node_steps(run_id: str) -> list[tuple[int, str]]:
    """(superstep, node) of each root node that wrote in the baseline, in order."""
    steps = dict(
        LangGraphCheckpoint.objects.filter(thread_id=run_id, checkpoint_ns="").values_list(
            "checkpoint_id", "step"
        )
    )
    found = set()
    for checkpoint_id, task_path in LangGraphWrite.objects.filter(
        thread_id=run_id, checkpoint_ns="", idx__gte=0
    ).values_list("checkpoint_id", "task_path"):
        node = node_of(task_path)
        if steps.get(checkpoint_id) is not None and node and not node.startswith("__"):
            found.add((steps[checkpoint_id] + 1, node))
    return sorted(found)
