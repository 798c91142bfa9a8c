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
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils.module_loading import import_string

from .engine import crashpoints, registry
from .engine.runs import start_run
from .models import Effect, Run, Step
from .services.sweeper import sweep

DONE = frozenset({*Run.TERMINAL, Run.Status.ESCALATED})
POLL_SECONDS = 0.02
# A run-level crash fires just after the run's final commit; give it this long to show.
FIRE_GRACE_SECONDS = 1.0

# Outcomes of one crashed run. The first two are what a correct engine produces.
RESUMED = "resumed"  # killed, resumed by another worker, finished like the baseline
FINISHED = "finished"  # killed after the run had finished: nothing left to resume
ESCALATED = "escalated"  # an unsafe write's outcome is unknown: held for a human
LOST = "lost"  # neither finished nor escalated in time
DIVERGED = "diverged"  # finished with another status or result than the baseline
NOT_REACHED = "not reached"  # the armed crash never fired: this cell tested nothing
FAILURES = frozenset({LOST, DIVERGED, NOT_REACHED})


class CrashTestError(Exception):
    """crashtest cannot run (no baseline, no providers, a bad agent or input)."""


POOLS = ("solo", "prefork")


@dataclass(frozen=True)
class Options:
    workers: int = 3
    # solo: the crash kills the whole worker (process, broker connection, unacked
    # message) and the supervisor starts a new one, which costs a second of CPU.
    # prefork: the crash kills the pool process executing the run; the Celery
    # master requeues the message and forks a fresh process at once. Same engine
    # recovery, much cheaper, so larger matrices finish sooner.
    pool: str = "solo"
    lease_ttl: float = 1.5
    sweep_interval: float = 0.5
    parallel: int | None = None  # runs in flight at once; default 2 per worker
    run_timeout: float = 60.0  # a run not finished or escalated by then is lost
    ignore_results: bool = False  # for agents whose model is not deterministic

    @property
    def in_flight(self) -> int:
        return self.parallel or 2 * self.workers


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


@dataclass
class Report:
    agent: str
    run_input: dict[str, Any]
    options: Options
    provider_url: str
    baseline: Run
    baseline_executions: Counter
    cases: list[Case]
    worker_restarts: int
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return sum(case.duplicates for case in self.cases)

    @property
    def lost(self) -> int:
        return sum(case.outcome == LOST for case in self.cases)

    @property
    def escalated(self) -> int:
        return sum(case.outcome == ESCALATED for case in self.cases)

    @property
    def ok(self) -> bool:
        return not any(case.failed for case in self.cases)

    def resume_times(self) -> list[float]:
        return sorted(c.resume_seconds for c in self.cases if c.resume_seconds is not None)

    def detect_times(self) -> list[float]:
        return sorted(c.detect_seconds for c in self.cases if c.detect_seconds is not None)

    def write(self, out: TextIO) -> None:
        _write_report(self, out)


# --- The cluster: provider server, supervised workers, sweeper ---------------------


def database_url() -> str:
    """The database this process uses, as a URL for the worker processes."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def providers_reachable(url: str) -> bool:
    try:
        response = httpx.get(
            f"{url.rstrip('/')}/providers/search", params={"q": "ping"}, timeout=1.0
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


class Cluster:
    """Everything crashtest runs against, started and stopped together."""

    def __init__(self, options: Options, work_dir: Path) -> None:
        self.options = options
        self.work_dir = work_dir
        self.crash_dir = work_dir / "crashes"
        self.crash_dir.mkdir()
        self.queue = f"crashtest-{uuid.uuid4().hex[:8]}"
        self.provider_url = settings.DURABLERUNS_PROVIDER_URL
        self.started_server = False
        self.workers: list[subprocess.Popen] = []
        self.restarts = 0
        self._server: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawned = 0

    def env(self) -> dict[str, str]:
        path = [os.getcwd(), str(settings.BASE_DIR), os.environ.get("PYTHONPATH", "")]
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "DATABASE_URL": database_url(),
            "REDIS_URL": settings.CELERY_BROKER_URL if settings.REDIS_URL else "",
            "DURABLERUNS_QUEUE": self.queue,
            "DURABLERUNS_PROVIDER_URL": self.provider_url,
            "DURABLERUNS_LEASE_TTL": str(self.options.lease_ttl),
            "DURABLERUNS_SWEEP_INTERVAL": str(self.options.sweep_interval),
            "DURABLERUNS_CRASH_DIR": str(self.crash_dir),
            "DURABLERUNS_AGENT_MODULES": ",".join(settings.DURABLERUNS_AGENT_MODULES),
            "PYTHONUNBUFFERED": "1",
        }

    def __enter__(self) -> Cluster:
        from .celery import app

        self._previous_queue = app.conf.task_default_queue
        app.conf.task_default_queue = self.queue  # our doorbells go to our workers only
        try:
            self._serve_providers()
            for _ in range(self.options.workers):
                self.workers.append(self._spawn_worker())
            self._start_thread(self._supervise, "crashtest-supervisor")
            self._start_thread(self._sweep, "crashtest-sweeper")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        from .celery import app

        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for proc in [*self.workers, *([self._server] if self._server else [])]:
            _terminate(proc)
        app.conf.task_default_queue = self._previous_queue
        self._delete_queue(app)

    def _delete_queue(self, app: Any) -> None:
        """Leave nothing behind in the broker (doorbells are worthless once we are done)."""
        with contextlib.suppress(Exception), app.connection_for_write() as conn:
            conn.default_channel.queue_delete(self.queue)

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _serve_providers(self) -> None:
        if providers_reachable(self.provider_url):
            return
        port = _free_port()
        self.provider_url = f"http://127.0.0.1:{port}"
        self._server = self._spawn(
            [
                sys.executable,
                "-m",
                "django",
                "runserver",
                "--noreload",
                "--skip-checks",
                f"127.0.0.1:{port}",
            ],
            "providers",
        )
        self.started_server = True
        deadline = time.monotonic() + 30
        while not providers_reachable(self.provider_url):
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise CrashTestError(
                    f"the provider server did not start; see {self.work_dir / 'providers.log'}"
                )
            time.sleep(0.1)

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        with log:
            return subprocess.Popen(
                args, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _spawn_worker(self) -> subprocess.Popen:
        # The solo pool executes tasks in the worker process itself, so a crash
        # point kills the whole worker, as an OOM kill or a lost machine would.
        self._spawned += 1
        name = f"crashtest-{self._spawned}-{uuid.uuid4().hex[:6]}@%h"
        return self._spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "durableruns",
                "worker",
                f"--pool={self.options.pool}",
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
                "-Q",
                self.queue,
                "-n",
                name,
            ],
            f"worker-{self._spawned}",
        )

    def _supervise(self) -> None:
        """Replace every worker that died (the crash points kill them)."""
        while not self._stop.wait(POLL_SECONDS):
            for index, proc in enumerate(self.workers):
                if proc.poll() is not None and not self._stop.is_set():
                    _terminate(proc)  # reap anything left in its process group
                    self.workers[index] = self._spawn_worker()
                    self.restarts += 1

    def _sweep(self) -> None:
        """The sweeper: rings runs whose lease expired (as `celery beat` does in production)."""
        try:
            while not self._stop.wait(self.options.sweep_interval):
                try:
                    sweep()
                except Exception:  # the database may be busy; the next sweep tries again
                    close_old_connections()
        finally:
            connection.close()


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)


# --- Counting what really happened ---------------------------------------------------


def demo_executions(run_id: str) -> Counter:
    """Executions per "step_id:tool" seen by the demo providers and the scripted model."""
    from .demo.models import ModelCall, ProviderCall

    prefix = f"{run_id}:"
    keys = [
        *ProviderCall.objects.filter(
            idempotency_key__startswith=prefix, outcome=ProviderCall.Outcome.EXECUTED
        ).values_list("idempotency_key", flat=True),
        *ModelCall.objects.filter(idempotency_key__startswith=prefix).values_list(
            "idempotency_key", flat=True
        ),
    ]
    # key = run:step_id:tool:fingerprint; the fingerprint may hold run-specific ids.
    return Counter(":".join(key.split(":")[1:3]) for key in keys)


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
    for effect in Effect.objects.filter(run=run).order_by("position"):
        for path, value in _strings(effect.result, f"{effect.position}-{effect.tool}"):
            if len(value) >= 6:
                names.setdefault(value, f"<{path}>")
    ordered = sorted(names.items(), key=lambda item: -len(item[0]))
    outcome = run.result if run.status == Run.Status.SUCCEEDED else _error_summary(run.error)
    return {"status": run.status, "outcome": _substitute(outcome, ordered)}


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


# --- The matrix -------------------------------------------------------------------------


def plan_cases(baseline: Run, session: str) -> list[Case]:
    """One case per crash point and step position it applies to, plus the run-level points."""
    effects = set(Effect.objects.filter(run=baseline).values_list("position", flat=True))
    steps = list(Step.objects.filter(run=baseline).order_by("position"))
    cases = []
    for point in crashpoints.ALL:
        if point in crashpoints.RUN_LEVEL:
            cases.append(Case(point, crashpoints.RUN_POSITION, "(run)", f"ct-{session}-{point}"))
            continue
        for step in steps:
            if crashpoints.applies(point, has_effect=step.position in effects):
                cases.append(
                    Case(
                        point, step.position, step.step_id, f"ct-{session}-{point}-{step.position}"
                    )
                )
    return cases


class CrashTest:
    """One agent and input to test: a baseline run and its matrix of crashed runs."""

    def __init__(self, agent: str, run_input: dict[str, Any]) -> None:
        self.agent = registry.get_agent(agent)  # UnknownAgent: a clear error, nothing started
        self.run_input = run_input
        self.session = uuid.uuid4().hex[:6]
        self.baseline: Run | None = None
        self.cases: list[Case] = []

    def start(self, case: Case | None = None) -> None:
        run_id = case.run_id if case else f"ct-{self.session}-baseline"
        start_run(self.agent.name, self.run_input, run_id=run_id, version=self.agent.version)

    def report(
        self, options: Options, cluster: Cluster, count: Callable[[str], Counter], seconds: float
    ) -> Report:
        assert self.baseline is not None
        base_counts = count(self.baseline.id)
        for case in self.cases:
            _judge(case, self.baseline, base_counts, count(case.run_id), options)
        return Report(
            self.agent.name,
            self.run_input,
            options,
            cluster.provider_url,
            self.baseline,
            base_counts,
            self.cases,
            cluster.restarts,
            seconds,
            _warnings(self.baseline, base_counts),
        )


def run(
    agent: str,
    run_input: dict[str, Any],
    options: Options | None = None,
    *,
    progress: TextIO | None = None,
) -> Report:
    """The crash matrix of one agent and input (what `manage.py crashtest` does)."""
    return run_many([CrashTest(agent, run_input)], options, progress=progress)[0]


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
            test.cases = plan_cases(test.baseline, test.session)
            cases += [(test, case) for case in test.cases]
            say(
                f"baseline {test.baseline.id}: {test.baseline.status}; "
                f"{len(test.cases)} crash points to test"
            )
        say(f"running {len(cases)} crashed runs, {options.in_flight} at a time")
        Scheduler(options, cluster, say).execute(cases)
        seconds = time.monotonic() - began
        reports = [test.report(options, cluster, count, seconds) for test in tests]
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
    pending = {f"ct-{t.session}-baseline": t for t in tests}
    while pending:
        for run in Run.objects.filter(pk__in=list(pending)):
            if run.status in (Run.Status.ESCALATED, Run.Status.AWAITING_APPROVAL):
                raise CrashTestError(
                    f"the uninterrupted run {run.id} stopped as {run.status}: crashtest needs "
                    "an input with which the agent finishes on its own"
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
                    # The dead worker's lease stays on the row until another takes over,
                    # so the fence seen now is the killed execution's.
                    case.fired_at, case.fence_at_fire = record["at"], fence
                    case.killed_pid = record["pid"]
            elif case.resumed_at is None:
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


def _judge(
    case: Case, baseline: Run, base_counts: Counter, counts: Counter, options: Options
) -> None:
    run = Run.objects.get(pk=case.run_id)
    case.status = run.status
    case.executions = counts
    case.extra = {k: n - base_counts[k] for k, n in counts.items() if n > base_counts[k]}
    case.duplicates = sum(case.extra.values())
    case.missing = sum(max(n - counts[k], 0) for k, n in base_counts.items())
    case.escalations = Effect.objects.filter(run=run, state=Effect.State.UNKNOWN).count()
    case.outcome = _outcome(case, run, baseline, options)


def _outcome(case: Case, run: Run, baseline: Run, options: Options) -> str:
    if run.status not in DONE:
        return LOST
    if case.fired_at is None:
        return NOT_REACHED
    if run.status == Run.Status.ESCALATED:
        return ESCALATED
    same = options.ignore_results or comparable(run) == comparable(baseline)
    if not same or case.missing:
        return DIVERGED
    return RESUMED if case.resumed_at is not None else FINISHED


def _warnings(baseline: Run, base_counts: Counter) -> list[str]:
    writes = [f"{e.position}-{e.tool}:{e.tool}" for e in Effect.objects.filter(run=baseline)]
    unseen = [key for key in writes if not base_counts[key]]
    if not unseen:
        return []
    return [
        f"the baseline's write call(s) {', '.join(unseen)} are not seen by the execution "
        f"counter ({settings.DURABLERUNS_CRASHTEST_COUNTER}), so duplicates there are "
        "invisible to crashtest. Point DURABLERUNS_CRASHTEST_COUNTER at a function "
        "(run_id) -> Counter of executions per 'step_id:tool' that asks your providers."
    ]


def _settings_line(tests: list[CrashTest], options: Options, cluster: Cluster) -> str:
    server = "started by crashtest" if cluster.started_server else "already running"
    lines = [
        f"crashtest {t.agent.name}@{t.agent.version} input "
        f"{json.dumps(t.run_input, sort_keys=True)}"
        for t in tests
    ]
    return "\n".join(
        [
            *lines,
            f"  {options.workers} {options.pool} workers (restarted when they die), lease TTL "
            f"{options.lease_ttl:g}s, sweep interval {options.sweep_interval:g}s, "
            f"providers at {cluster.provider_url} ({server})",
        ]
    )


# --- The table --------------------------------------------------------------------------

_COLUMNS = ("crash point", "step", "outcome", "duplicates", "escalations", "time to resume", "run")


def _row(case: Case) -> tuple[str, ...]:
    resume = "-" if case.resume_seconds is None else f"{case.resume_seconds:.2f}s"
    return (
        case.point,
        case.step,
        case.outcome,
        str(case.duplicates),
        str(case.escalations),
        resume,
        case.run_id,
    )


def _percentile(values: list[float], fraction: float) -> float:
    index = min(len(values) - 1, max(0, round(fraction * len(values) + 0.5) - 1))
    return values[index]


def resume_summary(report: Report) -> str:
    times, detected = report.resume_times(), report.detect_times()
    if not times:
        return "no run needed resuming"
    settings_used = (
        f"lease TTL {report.options.lease_ttl:g}s, sweep interval "
        f"{report.options.sweep_interval:g}s"
    )
    line = (
        f"time to resume after SIGKILL (another worker holds the lease): "
        f"{_spread(times)} over {len(times)} runs ({settings_used})"
    )
    if detected:
        line += (
            f"\n  of which lease expiry until the sweeper rang the run: {_spread(detected)};"
            " the rest is waiting for a free worker"
        )
    return line


def _spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f}s, p95 {_percentile(values, 0.95):.2f}s, "
        f"max {values[-1]:.2f}s"
    )


def _write_report(report: Report, out: TextIO) -> None:
    rows = [_COLUMNS, *(_row(case) for case in report.cases)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
    for case in report.cases:
        if case.extra:
            out.write(f"DUPLICATE in {case.run_id}: {case.extra} (beyond the baseline's)\n")
    for warning in report.warnings:
        out.write(f"WARNING: {warning}\n")
    out.write(
        f"\n{len(report.cases)} crashed runs of {report.agent} "
        f"(baseline {report.baseline.id}: {report.baseline.status}): "
        f"{report.duplicates} duplicate executions, {report.lost} lost, "
        f"{report.escalated} escalated, "
        f"{sum(c.outcome == DIVERGED for c in report.cases)} diverged, "
        f"{sum(c.outcome == NOT_REACHED for c in report.cases)} not reached; "
        f"{report.worker_restarts} worker restarts; {report.seconds:.1f}s\n"
        f"{resume_summary(report)}\n"
    )
