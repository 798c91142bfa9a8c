"""The Run context: what agent code calls. Every call is a step at the next position.

On each call the context looks at the run's recorded history. A recorded step is
checked against the request (kind, name, tool, argument fingerprint; invariant 9)
and its outcome is returned without executing anything (invariant 2). A new step
is executed, and its outcome is checkpointed before agent code sees it
(invariant 1). Tool calls that write go through the write-ahead effect ledger
(invariants 3-5).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from .. import logs, metrics
from ..models import CHECKPOINT_SCHEMA_VERSION, Approval, Effect, Step
from ..models import Run as RunRecord
from . import children as child_runs
from . import crashpoints, gates, llm, parallel, store, toolcalls
from .checkpoints import migrate
from .errors import (
    BudgetExceeded,
    DurableRunsError,
    NonDeterminismError,
    PayloadTooLarge,
    SerializationError,
    Suspend,
    TransientError,
    UsageError,
    WrongThread,
)
from .keys import fingerprint, idempotency_key
from .llm import Reply
from .outcomes import describe, rebuild, verdict
from .registry import IDEMPOTENT_WRITE, READ_ONLY, Tool, check_name, refuse_async
from .retry import AMBIGUOUS, PERMANENT, TRANSIENT, backoff_seconds, max_attempts

Kind = Step.Kind


@dataclass(slots=True)
class RecordedStep:
    """A step this executor has just committed, kept in memory in the shape of a loaded
    Step row (building a Django model instance cost a sixth of a step's client CPU)."""

    position: int
    kind: str
    name: str
    tool: str
    fingerprint: str
    result: Any
    error: Any
    attempts: int
    started_at: datetime
    finished_at: datetime
    schema_version: int = CHECKPOINT_SCHEMA_VERSION


# A step in a run's history: a loaded row, or one this executor has just committed.
Recorded = Step | RecordedStep


@dataclass(frozen=True)
class StepRequest:
    kind: str
    name: str
    tool: str = ""
    fingerprint: str = ""
    input: Any = None

    def describe(self) -> str:
        what = f"{self.kind} step {self.name!r}"
        return what + (f" (args {self.fingerprint})" if self.fingerprint else "")


class Run:
    """A run as agent code sees it. Created by the executor, never by agent code."""

    def __init__(
        self,
        record: RunRecord,
        lease: store.Lease,
        history: Mapping[int, Step],
        effects: dict[int, Effect],
        *,
        max_steps: int,
        max_duration: float,
    ) -> None:
        self.id = record.id
        self.agent = record.agent
        self.agent_version = record.agent_version
        self.sandbox = bool(getattr(record, "sandbox", False))
        self._record = record
        self._lease = lease
        # Loaded Step rows, then RecordedSteps as this executor commits new ones.
        self._history: dict[int, Recorded] = dict(history)
        # Summed once here and kept up to date in committed(): before_new_step() asks
        # on every step, and summing the history each time made a run quadratic. Waits
        # for a worker that has the agent (hand-backs) are not in any step.
        # Waits for a worker with the agent (handback.py) and for a person to say what
        # an unsafe write did (escalations) are not the agent's time either.
        outside = getattr(record, "handed_back_seconds", 0.0)
        outside += getattr(record, "escalated_seconds", 0.0)
        self._waited = waited_seconds(history.values()) + outside
        self._effects = effects
        self._max_steps = max_steps
        self._max_duration = max_duration
        self._position = 0
        self._thread = threading.get_ident()
        self._misuse: WrongThread | None = None
        self.branches = parallel.Branches()
        self._task_started = time.monotonic()
        self.executed = 0
        self.replayed = 0
        # Absolute totals from every committed step, so any pass can write them again.
        self.spend = llm.Spend.of(history.values())

    # A dry replay (engine/replay.py) replays a fan-out's branches one by one instead.
    executes_concurrently = True

    @property
    def position(self) -> int:
        return self._position

    @property
    def max_steps(self) -> int:
        return self._max_steps

    @property
    def fence(self) -> int:
        """This execution's lease number (a later execution has a higher one)."""
        return self._lease.fence

    # --- The agent-author API ---------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once; on replay return what it returned (or raised)."""
        refuse_async(fn, f"step {name!r}'s function")
        inputs = {"args": list(args), "kwargs": kwargs}
        with _value_errors_located(
            f"step {self._position} (compute {name!r})", "its arguments are "
        ):
            request = StepRequest(Kind.COMPUTE, check_name(name, "step"), "", fingerprint(inputs))
        position, recorded = self._next(request)
        if recorded is not None:
            return self._replay(recorded)
        return self._execute(position, request, lambda: fn(*args, **kwargs))

    def llm(self, name: str, *, messages: list[dict[str, Any]], **params: Any) -> Reply:
        """A memoised model call; returns the assistant's whole message, recorded: its
        text (a Reply is the text, as a str), `tool_calls`, `usage` (tokens and cost)
        and `finish_reason`. A replay returns exactly the same, without calling the
        model. `params` (tools=, temperature=, model=...) go to the model client."""
        inputs = {"messages": messages, **params}
        request = StepRequest(Kind.LLM, check_name(name, "step"), "", fingerprint(inputs), inputs)
        position, recorded = self._next(request)
        if recorded is None:
            key = idempotency_key(self.id, self._step_id(position, name), "llm", inputs)
            recorded = self._execute(
                position, request, lambda: self._complete(name, messages, params, key), raw=True
            )
            if recorded.error is None:
                with self.branches.lock:  # parallel branches add to the same totals
                    self.spend.add(llm.Reply.from_record(recorded.result))
                    store.record_spend(self._lease, self.spend.fields())
        return llm.Reply.from_record(self._replay(recorded))

    def call_tools(
        self,
        reply: Reply,
        tools: Iterable[Tool],
        *,
        messages: list[dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """Run the tool calls of `reply` concurrently, each through `run.call` as a branch
        of one fan-out (see `parallel`), and return the messages that give the model the
        results: the assistant message, then one result per call in the reply's order,
        whichever finished first, in the reply's shape (OpenAI `tool` messages, or an
        Anthropic `tool_result` user message). With `messages`, they are also appended.

        A call to a tool not in `tools`, with invalid JSON or bad arguments, or that
        raises dr.ModelRecoverableError becomes an error result for the model to read.
        """
        added = toolcalls.call_tools(self, reply, tools)
        if messages is not None:
            messages.extend(added)
        return added

    def parallel(
        self,
        branches: Iterable[Callable[[], Any] | tuple[Any, ...]],
        *,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Run the branches concurrently and return their values in submission order.

        Each branch is a callable (or `(fn, *args)`) that makes exactly one `run.*`
        call, e.g. `lambda: run.call(lookup_order, order_id=o)`: it is its own step,
        at the position its place in `branches` gives it (never its completion order),
        committed as it completes. On resume only the branches without a recorded
        step execute again. Every branch settles before this returns or raises: the
        first error in submission order is raised (or, with `return_exceptions`, each
        error is returned in its branch's place); a branch waiting on an approval or a
        retry suspends the run once the others have settled. Each branch counts
        against max_steps. Details in engine/parallel.py.
        """
        return parallel.fan_out(self, branches, return_exceptions=return_exceptions)

    def map(
        self, tool: Tool, items: Iterable[Mapping[str, Any]], *, return_exceptions: bool = False
    ) -> list[Any]:
        """`run.call(tool, **item)` for each item, concurrently: `run.parallel` of them."""
        if not isinstance(tool, Tool):
            raise UsageError(f"run.map() takes a @dr.tool, not {tool!r}")
        calls = [lambda item=item: self.call(tool, **item) for item in items]
        return self.parallel(calls, return_exceptions=return_exceptions)

    def call(self, tool: Tool, /, **args: Any) -> Any:
        """Call a registered tool with a deterministic idempotency key."""
        if not isinstance(tool, Tool):
            raise UsageError(f"run.call() takes a @dr.tool, not {tool!r}")
        tool.bind(args)
        where = f"step {self._position} (tool {tool.name!r})"
        with _value_errors_located(where, "the arguments are "):
            request = StepRequest(Kind.TOOL, tool.name, tool.name, fingerprint(args), args)
        position, recorded = self._next(request)
        if recorded is not None:
            return self._replay(recorded)
        key = idempotency_key(self.id, self._step_id(position, tool.name), tool.name, args)
        if tool.kind == READ_ONLY:
            return self._execute(position, request, lambda: tool.fn(**args, idempotency_key=key))
        return _EffectCall(self, position, request, tool, args, key).execute()

    def sleep(self, name: str, seconds: float) -> None:
        """A durable timer: the run waits without a worker and resumes when it is due."""
        request = StepRequest(Kind.SLEEP, check_name(name, "step"), "", fingerprint(seconds))
        position, recorded = self._next(request)
        if recorded is None:
            until = timezone.now() + timedelta(seconds=seconds)
            recorded = self._execute(
                position, request, lambda: {"until": until.isoformat()}, raw=True
            )
        until = datetime.fromisoformat(self._replay(recorded)["until"])
        if timezone.now() < until:
            raise Suspend(RunRecord.Status.WAITING, wake_at=until, reason=f"sleeping ({name})")

    def approval(
        self,
        name: str,
        *,
        summary: str = "",
        payload: Any = None,
        allowed: tuple[str, ...] = gates.DECISIONS,
        expires_in: float | timedelta | None = None,
        on_expiry: str = "reject",
        schema: dict[str, Any] | None = None,
        guards: Any = None,
        four_eyes: bool = False,
    ) -> gates.Decision:
        """Suspend until a person decides (or the approval expires); returns the decision.

        `payload` is shown to the reviewer and, if they edit it, validated against
        `schema`. `guards` says what the approval protects (shown as "what happens
        next"). With `four_eyes`, the person who started the run cannot approve it.
        """
        gate = gates.Gate.build(
            summary=summary,
            payload=payload,
            allowed=allowed,
            expires_in=expires_in,
            on_expiry=on_expiry,
            schema=schema,
            guards=guards,
            four_eyes=four_eyes,
        )
        described = gate.described()
        request = StepRequest(
            Kind.APPROVAL, check_name(name, "approval"), "", fingerprint(described), described
        )
        position, recorded = self._next(request)
        if recorded is None:
            recorded = self._await_decision(position, request, gate)
        return gates.Decision.from_outcome(self._replay(recorded))

    def child(self, agent: Any, input: dict[str, Any], *, version: str | None = None) -> Any:
        """Start `agent` (a @dr.agent function or its name) as a durable child run with
        `input`, wait for it holding no worker, and return its result. A child that
        fails raises dr.ChildRunFailed here (dr.ChildRunCancelled if it was cancelled).
        The child's id comes from this run's id and the step's position, so a replay
        finds the same child and never starts a second one (engine/children.py)."""
        return self._children([(agent, input, version)], return_exceptions=False)[0]

    def children(
        self, specs: Iterable[tuple[Any, dict[str, Any]]], *, return_exceptions: bool = False
    ) -> list[Any]:
        """Start one child run per (agent, input), all at once, wait until every one has
        finished, and return their results in the order given. The first failure (in
        that order) is raised, unless `return_exceptions`, which puts each failure in
        its child's place instead. Each child is a step of its own."""
        return self._children([(a, i, None) for a, i in specs], return_exceptions)

    def _children(
        self, specs: list[tuple[Any, Any, str | None]], return_exceptions: bool
    ) -> list[Any]:
        slots = []
        for agent, run_input, version in specs:
            name, wanted = child_runs.describe(agent, run_input, version)
            where = f"step {self._position} (child {name!r})"
            with _value_errors_located(where, "its input is "):
                request = StepRequest(Kind.CHILD, name, "", fingerprint(wanted), wanted)
            slots.append((*self._next(request), request))
        if any(recorded is None for _, recorded, _ in slots):
            # A fan-out over the budget starts none: no child runs on for a failed parent.
            self._check_step_budget(slots[-1][0])
        # Every child starts before any is waited for, so they run at the same time.
        found = {
            position: self._start_child(position, request)
            for position, recorded, request in slots
            if recorded is None
        }
        unfinished = [child.id for child in found.values() if not child.is_terminal]
        if unfinished:
            raise Suspend(
                RunRecord.Status.AWAITING_CHILD,
                reason=f"awaiting child run(s) {', '.join(unfinished)}",
            )
        results = []
        for position, recorded, request in slots:
            if recorded is None:
                recorded = self._commit_child(position, request, found[position])
            try:
                results.append(self._replay(recorded))
            except DurableRunsError as exc:
                if not return_exceptions:
                    raise
                results.append(exc)
        return results

    def _start_child(self, position: int, request: StepRequest) -> RunRecord:
        child = child_runs.existing(self._record, position, request.input)
        if child is None:
            # Only the first time: a resumed pass must not charge the wait to the budget.
            self.before_new_step(position)
            child = child_runs.start(self._lease, self._record, position, request.input)
        return child

    def _commit_child(self, position: int, request: StepRequest, child: RunRecord) -> Recorded:
        self._lease.ensure_held()
        result, error = child_runs.outcome(child)
        outcome = self.outcome(position, request, result, error, 1, child.created_at)
        outcome.finished_at = child.finished_at or timezone.now()
        with _value_errors_located(_where(position, request)):
            store.commit_step(self._lease, outcome)
        return self.committed(outcome, raw=True)

    def _await_decision(self, position: int, request: StepRequest, gate: gates.Gate) -> Recorded:
        approval = Approval.objects.filter(run_id=self.id, position=position).first()
        if approval is None:
            self.before_new_step(position)
            gates.open_approval(self._lease, position, request.name, gate)
            raise _awaiting(position, request.name)
        if approval.name != request.name:
            raise NonDeterminismError(
                f"non-determinism at step {position}: approval {approval.name!r} is open, "
                f"agent code asked for {request.describe()}",
                details={"position": position},
            )
        if approval.state == Approval.State.CLOSED:
            gates.reopen_approval(self._lease, approval, gate)
            raise _awaiting(position, request.name)
        if approval.is_pending:
            raise _awaiting(position, request.name)
        self._lease.ensure_held()
        gates.unseal_decided(approval)
        outcome = store.StepOutcome(
            position=position,
            step_id=self._step_id(position, request.name),
            kind=request.kind,
            name=request.name,
            tool="",
            fingerprint=request.fingerprint,
            input=request.input,
            result=gates.outcome_of(approval),
            error=None,
            attempts=1,
            started_at=approval.created_at,
            finished_at=approval.decided_at or timezone.now(),
            fan_out=self.branches.fan_out_of.get(position),
        )
        store.commit_step(self._lease, outcome)
        return self.committed(outcome, raw=True)

    # --- Replay ----------------------------------------------------------------

    def _next(self, request: StepRequest) -> tuple[int, Recorded | None]:
        branch = self.branches.current()
        if branch is not None:
            position = branch.claim(request)  # given when its fan-out was submitted
        else:
            position = self.reserve_positions(1, request)
        recorded = self._history.get(position)
        if recorded is not None:
            _check_same_step(position, recorded, request)
            with self.branches.lock:
                self.replayed += 1
                metrics.count_step(request.kind, "replayed")
        return position, recorded

    def reserve_positions(self, count: int, request: StepRequest | None = None) -> int:
        """The next `count` positions, in the agent's own thread; returns the first."""
        self._check_thread(request or StepRequest("parallel", f"{count} branches"))
        position = self._position
        self._position += count
        return position

    def is_recorded(self, position: int) -> bool:
        return position in self._history

    def _replay(self, recorded: Recorded) -> Any:
        recorded = migrate(recorded)
        if recorded.error is not None:
            raise rebuild(recorded.error)
        return store.normalise(recorded.result)

    def _check_thread(self, request: StepRequest) -> None:
        """Refuse a call from another thread at once, and stop the run at its own thread's
        next call (or its return): that thread may never see the other thread's error."""
        if threading.get_ident() == self._thread:
            if self._misuse is not None:
                raise self._misuse
            return
        self._misuse = WrongThread(
            f"{request.describe()} was called from thread "
            f"{threading.current_thread().name!r}, not the thread running the agent: run.* "
            "calls must come from the agent function itself, in an order replay can repeat "
            "(concurrent steps need the parallel-steps API, not threads)",
            details={"thread": threading.current_thread().name},
        )
        raise self._misuse

    def finish_check(self) -> None:
        """Agent code returned: history must not hold steps it no longer asks for."""
        if self._misuse is not None:
            raise self._misuse
        if len(self._history) > self._position:
            extra = self._history[self._position]
            raise NonDeterminismError(
                f"non-determinism: agent code finished after {self._position} steps, but history "
                f"has step {extra.position} ({extra.kind} {extra.name!r})",
                details={"position": self._position},
            )

    @staticmethod
    def _step_id(position: int, name: str) -> str:
        return f"{position}-{name}"

    # --- Execution ---------------------------------------------------------------

    def before_new_step(self, position: int) -> None:
        self._check_step_budget(position)
        self._check_spend()
        started = self._record.started_at or timezone.now()
        # Time spent waiting for a person or a durable timer is not the agent's to budget.
        elapsed = (timezone.now() - started).total_seconds() - self._waited
        if elapsed > self._max_duration:
            raise BudgetExceeded(
                f"time budget exhausted: {elapsed:.0f}s elapsed of {self._max_duration:.0f}s",
                details={"budget": "duration", "limit": self._max_duration},
            )
        if time.monotonic() - self._task_started > settings.DURABLERUNS_MAX_TASK_SECONDS:
            # Give other runs a turn; the next task replays up to here and goes on.
            raise Suspend(RunRecord.Status.QUEUED, reason="yielding after a long task")
        self._lease.ensure_held()
        logs.set_step(f"{position}")  # log records carry the step being executed
        crashpoints.crash_point(crashpoints.BEFORE_STEP, self.id, position, fence=self.fence)

    def _check_step_budget(self, position: int) -> None:
        if position >= self._max_steps:
            raise BudgetExceeded(
                f"step budget exhausted: the run used all {self._max_steps} steps",
                details={"budget": "steps", "limit": self._max_steps},
            )

    def _check_spend(self) -> None:
        max_tokens, max_cost = self._record.max_tokens, self._record.max_cost
        if max_tokens is not None and self.spend.tokens >= max_tokens:
            raise BudgetExceeded(
                f"token budget exhausted: the run used {self.spend.tokens} of {max_tokens} tokens",
                details={"budget": "tokens", "limit": max_tokens},
            )
        if max_cost is not None and self.spend.cost >= max_cost:
            raise BudgetExceeded(
                f"cost budget exhausted: the run spent ${self.spend.cost} of ${max_cost}",
                details={"budget": "cost", "limit": str(max_cost)},
            )

    def attempt_for(self, position: int) -> int:
        if self._record.retry_position == position:
            return self._record.retry_attempts + 1
        return 1

    def _execute(
        self, position: int, request: StepRequest, fn: Callable[[], Any], *, raw: bool = False
    ) -> Any:
        self.before_new_step(position)
        attempt = self.attempt_for(position)
        started = timezone.now()
        result, error, text = None, None, None
        store.release_connection()  # agent code may wait long: hold no session meanwhile
        try:
            returned = fn()
        except Exception as exc:
            # Nothing here writes through the ledger: an ambiguous outcome is a retry.
            if verdict(exc) == PERMANENT:
                error = _located(describe(exc), position, request)
            else:
                error = self.transient_failure(position, attempt, exc, started)
        else:
            try:
                result, text = _storable_result(returned)
            except SerializationError as exc:
                error = _located(describe(exc), position, request)
        outcome = self.outcome(position, request, result, error, attempt, started)
        outcome.result_text = text
        with _value_errors_located(_where(position, request)):
            store.commit_step(self._lease, outcome)  # the input may be over the limit
        return self.committed(outcome, raw=raw)

    def outcome(
        self,
        position: int,
        request: StepRequest,
        result: Any,
        error: Any,
        attempt: int,
        started: datetime,
    ) -> store.StepOutcome:
        return store.StepOutcome(
            position=position,
            step_id=self._step_id(position, request.name),
            kind=request.kind,
            name=request.name,
            tool=request.tool,
            fingerprint=request.fingerprint,
            input=request.input,
            result=result,
            error=error,
            attempts=attempt,
            started_at=started,
            finished_at=timezone.now(),
            fan_out=self.branches.fan_out_of.get(position),
        )

    def committed(self, outcome: store.StepOutcome, *, raw: bool = False) -> Any:
        """Bookkeeping after a checkpoint; returns (or raises) what replay would."""
        crashpoints.crash_point(
            crashpoints.AFTER_STEP_COMMIT, self.id, outcome.position, fence=self.fence
        )
        recorded = RecordedStep(
            position=outcome.position,
            kind=outcome.kind,
            name=outcome.name,
            tool=outcome.tool,
            fingerprint=outcome.fingerprint,
            result=outcome.result,
            error=outcome.error,
            attempts=outcome.attempts,
            started_at=outcome.started_at,
            finished_at=outcome.finished_at,
        )
        with self.branches.lock:  # parallel branches commit from their own threads
            self.executed += 1
            metrics.count_step(outcome.kind, "executed")
            self._history[outcome.position] = recorded
            self._waited += waited_seconds([recorded])
        if raw:
            return recorded
        if outcome.error is not None:
            raise rebuild(outcome.error)
        # Already normalised by the caller: exactly what a replay will return.
        return outcome.result

    def transient_failure(
        self, position: int, attempt: int, exc: Exception, started: datetime
    ) -> dict[str, Any]:
        """Schedule another attempt (raises Suspend), or return the exhausted error.

        The failed attempt's times go on the run row with the retry counter; the step's
        row takes them over when it commits (store.commit_step)."""
        if attempt < max_attempts():
            delay = backoff_seconds(attempt)
            earlier = self._record.retry_attempt_times if attempt > 1 else None
            error = describe(exc)
            raise Suspend(
                RunRecord.Status.WAITING,
                wake_in=delay,
                reason=f"retrying step {position} in {delay:.2f}s",
                retry_position=position,
                retry_attempts=attempt,
                # [started, finished, why]: the run page shows each failed attempt's
                # error, not only the last one's.
                retry_attempt_times=[
                    *(earlier or []),
                    [started.isoformat(), timezone.now().isoformat(), _attempt_error(error)],
                ],
                last_error=error,
            )
        return {
            "type": "RetriesExhausted",
            "message": (
                f"step {position} gave up after {attempt} attempts "
                f"(DURABLERUNS_RETRY_MAX_ATTEMPTS): {describe(exc)['message']}"
            ),
        }

    def _complete(
        self, name: str, messages: list[dict[str, Any]], params: dict[str, Any], key: str
    ) -> dict[str, Any]:
        reply = llm.get_client().complete(
            messages=messages, agent=self.agent, step=name, idempotency_key=key, **params
        )
        return llm.as_record(reply, model=llm.model_name(params))


# Steps whose whole span is a wait: for a person, or for child runs (which have
# budgets of their own).
WAITS = (Kind.APPROVAL, Kind.CHILD)


def waited_seconds(steps: Any) -> float:
    """Seconds the steps spent waiting for a person, a child run or a durable sleep:
    time that is not the agent's to budget (max_duration). The run page shows the same."""
    now = timezone.now()
    waited = 0.0
    for step in steps:
        if step.kind in WAITS and step.started_at and step.finished_at:
            waited += (step.finished_at - step.started_at).total_seconds()
        elif step.kind == Kind.SLEEP and isinstance(step.result, dict) and step.started_at:
            # A sleep's step commits when it starts; the wait runs until its wake-up.
            until = min(datetime.fromisoformat(step.result["until"]), now)
            waited += max((until - step.started_at).total_seconds(), 0.0)
    return waited


def _check_same_step(position: int, recorded: Recorded, request: StepRequest) -> None:
    same = (
        recorded.kind == request.kind
        and recorded.name == request.name
        and recorded.tool == request.tool
        and recorded.fingerprint == request.fingerprint
    )
    if not same:
        expected = StepRequest(recorded.kind, recorded.name, recorded.tool, recorded.fingerprint)
        raise NonDeterminismError(
            f"non-determinism at step {position}: history has {expected.describe()}, "
            f"agent code asked for {request.describe()}",
            details={
                "position": position,
                "expected": expected.describe(),
                "actual": request.describe(),
            },
        )


def _awaiting(position: int, name: str) -> Suspend:
    return Suspend(
        RunRecord.Status.AWAITING_APPROVAL,
        reason=f"awaiting approval ({name})",
        approval_position=position,
    )


def _located(error: dict[str, Any], position: int, request: StepRequest) -> dict[str, Any]:
    error["message"] = f"{_where(position, request)}: {error['message']}"
    return error


def _where(position: int, request: StepRequest) -> str:
    return f"step {position} ({request.kind} {request.name!r})"


@contextmanager
def _value_errors_located(where: str, what: str = "") -> Iterator[None]:
    """A value agent code passed cannot be stored: say where, before anything ran."""
    try:
        yield
    except SerializationError as exc:
        raise type(exc)(f"{where}: {what}{exc}") from None


def _storable_result(value: Any) -> tuple[Any, str]:
    """`value` normalised and its stored text, or a SerializationError that says the fix:
    a result is checked before anything is committed, so a step never half-commits."""
    try:
        result, text = store.normalised_text(value)
        store.storable(text, "the result")
    except PayloadTooLarge:
        raise  # its message names the setting
    except SerializationError as exc:
        raise SerializationError(
            f"the result is {exc}; return only JSON values Postgres can store (dicts with "
            "string keys, lists, str, int, finite float, bool, None; no NUL character), "
            "e.g. a datetime as .isoformat()"
        ) from None
    return result, text


class _EffectCall:
    """One write-tool call through the ledger: started row, call, result + step commit."""

    def __init__(
        self,
        run: Run,
        position: int,
        request: StepRequest,
        tool: Tool,
        args: dict[str, Any],
        key: str,
    ) -> None:
        self.run, self.position, self.request = run, position, request
        self.tool, self.args, self.key = tool, args, key
        self.lease = run._lease

    def execute(self) -> Any:
        self.run.before_new_step(self.position)
        self.attempt = self.run.attempt_for(self.position)
        self.started = timezone.now()
        existing = self.run._effects.get(self.position)
        if self.run.sandbox:
            return self._sandboxed(existing)
        if existing is None:
            self._start()
        else:
            known = self._recover(existing)
            if known is not _CALL_AGAIN:
                return self._commit(Effect.State.SUCCEEDED, known, None)
            store.restart_effect(self.lease, self.key)
        crashpoints.crash_point(
            crashpoints.AFTER_EFFECT_STARTED, self.run.id, self.position, fence=self.lease.fence
        )
        return self._call()

    def _start(self) -> None:
        """The effect row, recorded before the call; a value that cannot be stored is
        reported with its step and tool."""
        with _value_errors_located(_where(self.position, self.request)):
            store.start_effect(
                self.lease,
                position=self.position,
                key=self.key,
                tool=self.tool.name,
                tool_kind=self.tool.kind,
                fingerprint=self.request.fingerprint,
                args=self.args,
            )

    def _sandboxed(self, existing: Effect | None) -> Any:
        """A sandboxed run records the call it would make, and does not make it."""
        if existing is None:
            self._start()
        if self.tool.sandbox_fn is not None:
            value = self.tool.sandbox_fn(**self.args, idempotency_key=self.key)
        else:
            value = {"sandboxed": True, "tool": self.tool.name, "args": self.args}
        return self._commit(Effect.State.SANDBOXED, store.normalise(value), None)

    def _recover(self, effect: Effect) -> Any:
        """Decide what a previous attempt's ledger row means (invariant 5)."""
        if effect.idempotency_key != self.key:
            raise NonDeterminismError(
                f"non-determinism at step {self.position}: the ledger has effect "
                f"{effect.idempotency_key}, agent code asked for {self.key}",
                details={"position": self.position},
            )
        state = effect.state
        if state == Effect.State.SUCCEEDED:
            return store.normalise(effect.result)
        if state == Effect.State.RESOLVED:
            if effect.resolution == Effect.Resolution.HAPPENED:
                return store.normalise(effect.result)
            if effect.resolution == Effect.Resolution.NOT_HAPPENED:
                return _CALL_AGAIN
            # Aborted, then the run was resumed: nobody said whether the call happened.
            self._escalate("the run was aborted while this call's outcome was unknown")
        if state == Effect.State.FAILED:
            return _CALL_AGAIN  # a transient failure: the provider said it did not happen
        if state == Effect.State.STARTED and self.tool.kind == IDEMPOTENT_WRITE:
            return _CALL_AGAIN  # same key: the provider deduplicates
        if state == Effect.State.STARTED and self.tool.reconcile_fn is not None:
            found = self._reconcile()
            return _CALL_AGAIN if found is None else found
        self._escalate("the call was started but its outcome was never recorded")
        return None  # unreachable: _escalate raises

    def _reconcile(self) -> Any:
        reconcile = self.tool.reconcile_fn
        assert reconcile is not None  # the caller checked
        store.release_connection()
        try:
            found = reconcile(**self.args, idempotency_key=self.key)
            return None if found is None else _storable_result(found)[0]
        except Exception as exc:
            self._escalate(f"reconcile failed: {describe(exc)['message']}")
            return None  # unreachable: _escalate raises

    def _escalate(self, why: str) -> None:
        error = {"type": "AmbiguousOutcome", "message": why}
        store.set_effect_state(self.lease, self.key, Effect.State.UNKNOWN, error=error)
        raise Suspend(
            RunRecord.Status.ESCALATED,
            reason=f"step {self.position}: outcome of {self.tool.name} unknown ({why})",
            last_error=error,
        )

    def _call(self) -> Any:
        self.lease.ensure_held()
        store.release_connection()  # no session held while the tool waits
        try:
            returned = self.tool.fn(**self.args, idempotency_key=self.key)
        except Exception as exc:
            found = verdict(exc)
            if found == TRANSIENT:
                return self._transient(exc)
            if found == AMBIGUOUS:
                return self._ambiguous(exc)
            error = _located(describe(exc), self.position, self.request)
            self._crash_point_after_tool()
            return self._commit(Effect.State.FAILED, None, error)
        self._crash_point_after_tool()
        try:
            value, _ = _storable_result(returned)
        except SerializationError as exc:
            # The write happened: recording it as failed would let a resume or a fork
            # send it again (invariant 16). A person says what it returned.
            self._escalate(
                f"{_where(self.position, self.request)}: the call happened, but its result "
                f"cannot be stored: {exc}. Resolve this escalation with the result "
                "(or fix the tool and resolve it as happened)"
            )
        return self._commit(Effect.State.SUCCEEDED, value, None)

    def _crash_point_after_tool(self) -> None:
        crashpoints.crash_point(
            crashpoints.AFTER_TOOL_RETURNED, self.run.id, self.position, fence=self.lease.fence
        )

    def _transient(self, exc: Exception) -> Any:
        error = describe(exc)
        store.finish_effect(
            self.lease, self.key, state=Effect.State.FAILED, args=self.args, error=error
        )
        exhausted = self.run.transient_failure(self.position, self.attempt, exc, self.started)
        return self._commit(Effect.State.FAILED, None, exhausted)

    def _ambiguous(self, exc: BaseException) -> Any:
        if self.tool.kind == IDEMPOTENT_WRITE:
            return self._transient(TransientError(f"ambiguous, retrying with the same key: {exc}"))
        if self.tool.reconcile_fn is not None:
            found = self._reconcile()
            if found is not None:
                return self._commit(Effect.State.SUCCEEDED, found, None)
            return self._transient(TransientError(f"did not happen (reconciled): {exc}"))
        self._escalate(f"{type(exc).__name__}: {exc}")
        return None

    def _commit(self, state: str, result: Any, error: Any) -> Any:
        outcome = self.run.outcome(
            self.position, self.request, result, error, self.attempt, self.started
        )
        store.finish_effect(
            self.lease,
            self.key,
            state=state,
            args=self.args,
            result=result,
            error=error,
            step=outcome,
        )
        return self.run.committed(outcome)


_CALL_AGAIN = object()


ATTEMPT_ERROR_CHARS = 300  # one failed attempt's error, as a retrying step's timeline says it


def _attempt_error(error: dict[str, Any]) -> str:
    text = f"{error['type']}: {error['message']}"
    return text if len(text) <= ATTEMPT_ERROR_CHARS else text[: ATTEMPT_ERROR_CHARS - 1] + "…"
