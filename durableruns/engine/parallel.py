"""Parallel steps: `run.parallel`, `run.map` and `run.call_tools` fan branches out to
threads and join them.

A branch is a callable that makes exactly one `run.*` call (`run.call`, `run.llm`,
`run.step`, `run.approval`...), so each branch is its own step. Positions are handed
out when the fan-out is submitted, in submission order, never in completion order:
branch i of a fan-out starting at position p is step p + i, with the step id and the
idempotency keys that position gives, whichever branch finishes first. Each branch
commits its step as it completes, under the run's lease (every write is still fenced)
and on its thread's own database connection, closed when the branch ends.

On resume, the branches with a recorded step are replayed in the agent's thread
(no thread, no database); only the others execute again. A replayed branch that no
longer matches history stops the fan-out before anything executes (invariant 9).

A fan-out settles when every branch has an outcome, and then returns the branches'
values in submission order, or raises, in this order of precedence:
1. a lost lease or an unreachable store (the executor stops without writing);
2. a stop of the run (non-determinism, budgets, misuse), the first in submission order;
3. a suspension (an approval, a retry's backoff, an escalation): the run waits,
   an escalation before anything else, otherwise the first in submission order.
   The branches that did not commit run again when it wakes, so a fan-out with a
   pending approval and a failed branch waits for the approval first;
4. a branch's error (a tool's PermanentError, exhausted retries...): the first in
   submission order, or, with `return_exceptions=True`, every error in its branch's
   place in the list.
The run row has one retry slot (Run.retry_position): when several branches fail
transiently at once the first one's attempt count is kept, the others start their
count again on the next pass (each is still bounded by the attempt limit).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection

from ..models import Run as RunRecord
from . import crashpoints, store
from .errors import BudgetExceeded, LeaseLost, RunStopped, Suspend, UsageError
from .registry import Tool

if TYPE_CHECKING:
    from .context import Run, StepRequest

Thunk = Callable[[], Any]


@dataclass
class Branch:
    """One branch of a fan-out: the step position it was given at submission."""

    index: int
    position: int
    fn: Thunk
    claimed: bool = False

    def claim(self, request: StepRequest) -> int:
        if self.claimed:
            raise UsageError(
                f"branch {self.index} of the fan-out at step {self.position - self.index} "
                f"asked for a second step ({request.describe()}): a branch of run.parallel "
                "makes exactly one run.* call (fan out again after the join instead)"
            )
        self.claimed = True
        return self.position


@dataclass
class Branches:
    """A run's fan-out bookkeeping: the branch bound to each thread, the fan-out each
    branch position belongs to (committed with its step), and the lock around the
    run context's shared counters."""

    local: threading.local = field(default_factory=threading.local)
    fan_out_of: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> Branch | None:
        return getattr(self.local, "branch", None)


@dataclass
class _Settled:
    value: Any = None
    error: BaseException | None = None


def fan_out(
    run: Run, branches: Iterable[Thunk | Sequence[Any]], *, return_exceptions: bool = False
) -> list[Any]:
    thunks = [_thunk(branch) for branch in branches]
    if run.branches.current() is not None:
        raise UsageError("run.parallel was called inside a branch: fan out from the agent itself")
    start = run.reserve_positions(len(thunks))
    plan = [Branch(index, start + index, fn) for index, fn in enumerate(thunks)]
    for branch in plan:
        run.branches.fan_out_of[branch.position] = start
    recorded = [branch for branch in plan if run.is_recorded(branch.position)]
    new = [branch for branch in plan if not run.is_recorded(branch.position)]
    if new:
        _check_budget(run, start, len(plan))
    if not run.executes_concurrently:
        new, recorded = [], plan  # a dry replay: each branch in turn, in this thread
    settled = {branch.index: _run_branch(run, branch) for branch in recorded}
    stop = _stop(settled[index] for index in sorted(settled))
    if stop is not None:
        raise stop  # e.g. a replayed branch diverged: execute nothing
    settled.update(_execute(run, new, start))
    return _join([settled[branch.index] for branch in plan], return_exceptions)


def _thunk(branch: Thunk | Sequence[Any]) -> Thunk:
    """A branch is a callable, or (fn, *args) for fn(*args)."""
    tool = branch[0] if isinstance(branch, tuple | list) and branch else branch
    if isinstance(tool, Tool):
        # Called as a plain function it would run with no key and no ledger entry.
        raise UsageError(
            f"a branch of run.parallel calls a tool through run: "
            f"lambda: run.call({tool.name}, ...), or run.map({tool.name}, items)"
        )
    if callable(branch):
        return branch
    if isinstance(branch, tuple | list) and branch and callable(branch[0]):
        fn, *args = branch
        return lambda: fn(*args)
    raise UsageError(f"a branch of run.parallel is a callable or (fn, *args), not {branch!r}")


def _check_budget(run: Run, start: int, count: int) -> None:
    """Budgets count branches: a fan-out that would pass max_steps runs no branch."""
    limit = run.max_steps
    if start + count > limit:
        raise BudgetExceeded(
            f"step budget exhausted: a fan-out of {count} branches at step {start} needs "
            f"{start + count} steps, the run's budget is {limit}",
            details={"budget": "steps", "limit": limit},
        )


def _execute(run: Run, new: list[Branch], start: int) -> dict[int, _Settled]:
    """Execute the branches without a recorded step, concurrently.

    With the crash point `mid_fan_out` armed at a branch's position, the branches
    before it execute and commit first, then the worker dies before the others start:
    the crash matrix's "some branches committed, some not"."""
    split = crashpoints.armed_position(run.id, crashpoints.MID_FAN_OUT)
    if split is None or not any(branch.position == split for branch in new):
        return _concurrently(run, new)
    settled = _concurrently(run, [branch for branch in new if branch.position < split])
    crashpoints.crash_point(crashpoints.MID_FAN_OUT, run.id, split, fence=run.fence)
    settled.update(_concurrently(run, [branch for branch in new if branch.position >= split]))
    return settled


def _concurrently(run: Run, branches: list[Branch]) -> dict[int, _Settled]:
    if not branches:
        return {}
    store.release_connection()  # the agent's thread only waits from here: no session
    width = min(len(branches), max(settings.DURABLERUNS_MAX_PARALLEL_BRANCHES, 1))
    name = f"branch-{run.id[:24]}"
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix=name) as pool:
        # Each branch runs in a copy of the agent's context (its log fields).
        futures = {
            branch.index: pool.submit(contextvars.copy_context().run, _branch_thread, run, branch)
            for branch in branches
        }
        return {index: future.result() for index, future in futures.items()}


def _branch_thread(run: Run, branch: Branch) -> _Settled:
    try:
        return _run_branch(run, branch)
    finally:
        connection.close()  # this thread's own session: no branch keeps one after it ends


def _run_branch(run: Run, branch: Branch) -> _Settled:
    run.branches.local.branch = branch
    try:
        value = branch.fn()
        if not branch.claimed:
            raise UsageError(
                f"branch {branch.index} of the fan-out at step {branch.position - branch.index} "
                "made no run.* call: each branch is one step (run.call, run.llm, run.step...)"
            )
        return _Settled(value=value)
    except BaseException as exc:  # settled like any outcome; _join decides what wins
        return _Settled(error=exc)
    finally:
        run.branches.local.branch = None


def _stop(settled: Iterable[_Settled]) -> BaseException | None:
    """What must stop the run whatever the other branches did, if anything."""
    errors = [outcome.error for outcome in settled if outcome.error is not None]
    for wanted in (LeaseLost, RunStopped):
        for error in errors:
            if isinstance(error, wanted):
                return error
    for error in errors:
        # Anything else that is not an Exception (a dry replay's stop, an interrupt).
        if not isinstance(error, Exception | Suspend):
            return error
    return None


def _join(settled: list[_Settled], return_exceptions: bool) -> list[Any]:
    stop = _stop(settled)
    if stop is not None:
        raise stop
    suspends = [s.error for s in settled if isinstance(s.error, Suspend)]
    if suspends:
        escalated = [s for s in suspends if s.status == RunRecord.Status.ESCALATED]
        raise (escalated or suspends)[0]
    if not return_exceptions:
        for outcome in settled:
            if outcome.error is not None:
                raise outcome.error
    return [outcome.error if outcome.error is not None else outcome.value for outcome in settled]
