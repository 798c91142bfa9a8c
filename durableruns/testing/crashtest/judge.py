"""Judging a crashed run against the uninterrupted one: what really executed, and
whether the run ended the same way (modulo run-specific ids)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils.module_loading import import_string

from durableruns.engine import liveness
from durableruns.models import Effect, Run, Step

from .cluster import SHARED_POOLS, Options
from .plan import (
    DIVERGED,
    ESCALATED,
    FINISHED,
    KILLED_ELSEWHERE,
    LOST,
    NOT_REACHED,
    RESUMED,
    Case,
)

DONE = frozenset({*Run.TERMINAL, Run.Status.ESCALATED})


# --- Counting what really happened ---------------------------------------------------


class Executions(Counter):
    """What an execution counter may return instead of a plain Counter: executions per
    "step_id:tool", and apart from them
    - `deduplicated`: the same-key re-sends its provider answered from its idempotency
      store without executing again (no second effect, so never a duplicate; a tool
      misdeclared idempotent shows up as executed);
    - `cut`: model calls a crash cut before their answer was recorded. The resumed run
      asks again, as it must (nothing was recorded to replay): the price of the crash,
      not a duplicate. A call made after its step was recorded stays a duplicate."""

    def __init__(self, executed: Any = (), deduplicated: Any = (), cut: Any = ()) -> None:
        super().__init__(executed)
        self.deduplicated: Counter = Counter(deduplicated)
        self.cut: Counter = Counter(cut)


def demo_executions(run_id: str) -> Executions:
    """Executions per "step_id:tool" seen by the demo providers and the scripted model;
    model calls made before the recorded start of their step are `cut`."""
    from durableruns.demo.models import ModelCall, ProviderCall

    # The run's own keys and its child runs' (ids "<run>.c<position>", at any depth).
    writes = ProviderCall.objects.filter(
        idempotency_key__startswith=run_id, outcome=ProviderCall.Outcome.EXECUTED
    ).values_list("idempotency_key", flat=True)
    calls = ModelCall.objects.filter(idempotency_key__startswith=run_id).values_list(
        "idempotency_key", "created_at"
    )
    recorded = _recorded_starts(run_id)
    executed, cut = Counter(), Counter()
    for key in writes:
        _count(executed, run_id, key)
    for key, at in calls:
        began = recorded.get(tuple(key.split(":")[:2]))
        _count(cut if began is not None and at < began else executed, run_id, key)
    return Executions(executed, cut=cut)


def _recorded_starts(run_id: str) -> dict[tuple[str, ...], Any]:
    """When the execution that recorded each step of the run (and its children) began."""
    steps = Step.objects.filter(Q(run_id=run_id) | Q(run__id__startswith=f"{run_id}.c"))
    return {
        (owner, step): began
        for owner, step, began in steps.values_list("run_id", "step_id", "started_at")
    }


def _count(counts: Counter, run_id: str, key: str) -> None:
    # key = run:step_id:tool:fingerprint; the fingerprint may hold run-specific ids.
    owner, step_and_tool = key.split(":")[0], ":".join(key.split(":")[1:3])
    if owner == run_id:
        counts[step_and_tool] += 1
    elif owner.startswith(f"{run_id}.c"):
        counts[f"{owner[len(run_id) + 1 :]}/{step_and_tool}"] += 1  # "c0/1-send_email:..."


def execution_counter() -> Callable[[str], Counter]:
    return import_string(settings.DURABLERUNS_CRASHTEST_COUNTER)


# --- Comparing results modulo run-specific ids ---------------------------------------


def comparable(run: Run) -> Any:
    """The run's status and result with its own ids replaced by stable placeholders.

    Run-specific values are the run id and the strings providers returned (a refund
    id derived from the run's key); each is replaced by the name of the step slot
    and field it came from, which is the same in every run of the agent.
    """
    names = {run.id: "<run>"}
    effects = Effect.objects.filter(run_id__in=_family(run)).order_by("run_id", "position")
    for effect in effects:
        where = effect.run_id[len(run.id) + 1 :]  # "" for the run's own, "c0" for a child's
        slot = f"{where}/" if where else ""
        for path, value in _strings(effect.result, f"{slot}{effect.position}-{effect.tool}"):
            if len(value) >= 6:
                names.setdefault(value, f"<{path}>")
    outcome = run.result if run.status == Run.Status.SUCCEEDED else _error_summary(run.error)
    if run.kind == Run.Kind.LANGGRAPH:
        thread_id, outcome = _thread_state(run)
        names[thread_id] = "<thread>"
    ordered = sorted(names.items(), key=lambda item: -len(item[0]))
    return {"status": run.status, "outcome": _substitute(outcome, ordered)}


def _family(run: Run) -> list[str]:
    """The run's id and its child runs', at any depth (their results reach the run's)."""
    found, level = [run.id], [run.id]
    while level:
        level = list(Run.objects.filter(parent_run_id__in=level).values_list("pk", flat=True))
        found.extend(level)
    return found


def _thread_state(run: Run) -> tuple[str, Any]:
    """A LangGraph thread's id and final state values (its run has no result)."""
    from durableruns.langgraph.resume import load_graph

    thread_id = run.langgraph_thread.thread_id
    state = load_graph(run.agent).get_state({"configurable": {"thread_id": thread_id}})
    return thread_id, state.values


def _error_summary(error: Any) -> Any:
    if isinstance(error, dict):
        return {"type": error.get("type"), "message": error.get("message")}
    return error


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key in sorted(value):
            yield from _strings(value[key], f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _substitute(value: Any, names: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for original, placeholder in names:
            value = value.replace(original, placeholder)
        return value
    if isinstance(value, dict):
        return {key: _substitute(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, names) for item in value]
    return value


# --- Judging one crashed run ---------------------------------------------------------


def judge(
    case: Case,
    baseline: Run,
    base_counts: Counter,
    counts: Counter,
    options: Options,
    kills: Mapping[int, float] | None = None,
) -> None:
    """Fill in what the crashed run executed beyond or short of the baseline, and its
    outcome; `kills`: when each crash killed its process (pid: time.time())."""
    run = Run.objects.get(pk=case.run_id)
    case.status = run.status
    case.executions = counts
    case.extra = _beyond(counts, base_counts)
    case.duplicates = sum(case.extra.values())
    case.deduplicated = _beyond(_apart(counts, "deduplicated"), _apart(base_counts, "deduplicated"))
    case.cut = _beyond(_apart(counts, "cut"), _apart(base_counts, "cut"))
    case.missing = sum(max(n - counts[k], 0) for k, n in base_counts.items())
    case.escalations = Effect.objects.filter(run=run, state=Effect.State.UNKNOWN).count()
    case.outcome = _outcome(case, run, baseline, options, kills or {})


def _apart(counts: Counter, kind: str) -> Counter:
    """What an Executions counts apart from executions (`deduplicated` or `cut`)."""
    return getattr(counts, kind) if isinstance(counts, Executions) else Counter()


def _beyond(counts: Counter, base: Counter) -> dict[str, int]:
    return {k: n - base[k] for k, n in counts.items() if n > base[k]}


def _outcome(
    case: Case, run: Run, baseline: Run, options: Options, kills: Mapping[int, float]
) -> str:
    if run.status not in DONE:
        return LOST
    elsewhere = (
        case.fired_at is None
        and options.pool in SHARED_POOLS
        and _killed_while_executing(run, kills)
    )
    if case.fired_at is None and not elsewhere:
        return NOT_REACHED
    if run.status == Run.Status.ESCALATED:
        return ESCALATED
    same = options.ignore_results or comparable(run) == comparable(baseline)
    if not same or case.missing:
        return DIVERGED
    if elsewhere:
        return KILLED_ELSEWHERE
    return RESUMED if case.resumed_at is not None else FINISHED


# A run's own after_run_finished point fires a moment after its end is committed.
ENDED_MOMENT = 1.0  # seconds


def _killed_while_executing(run: Run, kills: Mapping[int, float]) -> bool:
    """Whether another run's crash killed a process that executed some of this run's
    steps before the run ended (or a moment after: between its end and its own
    after_run_finished point). On a shared pool a crash kills every run of its worker,
    wherever each was, which may leave its own point unreachable: a step already
    recorded, a write a lookup then finds done, or escalates, an end already committed."""
    ended = run.finished_at.timestamp() if run.finished_at else time.time()
    owners = Step.objects.filter(run=run).values_list("executed_by", flat=True).distinct()
    pids = {liveness.pid_of(owner) for owner in owners}
    return any(pid in kills and kills[pid] <= ended + ENDED_MOMENT for pid in pids)


def counter_warnings(baseline: Run, base_counts: Counter) -> list[str]:
    """Warn when the execution counter cannot see the baseline's writes (duplicates would hide)."""
    writes = [f"{e.position}-{e.tool}:{e.tool}" for e in Effect.objects.filter(run=baseline)]
    unseen = [key for key in writes if not base_counts[key]]
    if baseline.kind == Run.Kind.LANGGRAPH and not base_counts:
        # A graph has no ledger to compare with: a counter that sees nothing is blind.
        unseen = ["(any node's)"]
    if not unseen:
        return []
    return [
        f"the baseline's write call(s) {', '.join(unseen)} are not seen by the execution "
        f"counter ({settings.DURABLERUNS_CRASHTEST_COUNTER}), so duplicates there are "
        "invisible to crashtest. Point DURABLERUNS_CRASHTEST_COUNTER at a function "
        "(run_id) -> Counter of executions per 'step_id:tool' that asks your providers."
    ]
