from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from durableruns.engine import crashpoints
from durableruns.engine.errors import DurableRunsError
from durableruns.engine.runs import check_input_text
from durableruns.testing import crashtest
from durableruns.testing.crashtest import CrashTestError, Options


class Command(BaseCommand):
    help = (
        "Run AGENT once uninterrupted, then once per crash point and step with a real worker "
        "killed (SIGKILL) there; compare what the providers executed with the uninterrupted "
        "run. Exits non-zero on any duplicate execution, lost run or diverged result."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        defaults = Options()
        parser.add_argument("agent")
        parser.add_argument("--input", default="{}", help="the run input, a JSON object")
        parser.add_argument(
            "--workers",
            type=int,
            default=defaults.workers,
            help=f"worker processes (default {defaults.workers})",
        )
        parser.add_argument(
            "--pool",
            choices=crashtest.POOLS,
            default=defaults.pool,
            help="solo: a crash kills the whole worker (default); prefork: "
            "it kills the pool process, which Celery replaces at once; threads (the "
            "documented worker) or gevent: each worker executes its share of --parallel "
            "on a pool of sessions, and a crash kills all of them",
        )
        parser.add_argument(
            "--parallel", type=int, help="runs in flight at once (default 2 per worker)"
        )
        parser.add_argument(
            "--lease-ttl",
            type=float,
            default=defaults.lease_ttl,
            help=f"workers' lease TTL, seconds (default {defaults.lease_ttl:g})",
        )
        parser.add_argument(
            "--sweep-interval",
            type=float,
            default=defaults.sweep_interval,
            help=f"seconds between sweeps (default {defaults.sweep_interval:g})",
        )
        parser.add_argument(
            "--run-timeout",
            type=float,
            default=defaults.run_timeout,
            help="a run neither finished nor escalated by then is lost",
        )
        parser.add_argument(
            "--langgraph",
            action="store_true",
            help="AGENT names a graph in DURABLERUNS_LANGGRAPH_GRAPHS (its threads are run "
            "by workers from their input; nodes with side effects must send "
            "durableruns.langgraph.idempotency_key)",
        )
        parser.add_argument(
            "--stand-in-model",
            action="store_true",
            help="drive run.llm through the OpenAI-compatible stand-in model served with the "
            "providers (real HTTP, tool_calls and usage) instead of the scripted model",
        )
        parser.add_argument(
            "--points",
            help="comma-separated crash points to test (default all: "
            + ", ".join(crashpoints.PLANNED)
            + ")",
        )
        parser.add_argument(
            "--ignore-results",
            action="store_true",
            help="do not compare final results (for a non-deterministic model)",
        )

    def handle(self, *args: object, **options: object) -> None:
        if int(options["workers"]) < 1:
            raise CommandError("--workers must be at least 1")
        if options["langgraph"] and options["pool"] in crashtest.SHARED_POOLS:
            # A crash there kills other threads past their own points, which the judge
            # tells from the steps' executors, and a graph's nodes are not steps.
            raise CommandError("--langgraph runs on --pool solo or prefork")
        if options["pool"] == "gevent" and importlib.util.find_spec("gevent") is None:
            raise CommandError(
                "--pool=gevent needs the gevent extra: pip install 'durableruns[gevent]'"
            )
        settings = Options(
            workers=int(options["workers"]),
            pool=str(options["pool"]),
            lease_ttl=float(options["lease_ttl"]),
            sweep_interval=float(options["sweep_interval"]),
            parallel=options["parallel"],
            run_timeout=float(options["run_timeout"]),
            ignore_results=bool(options["ignore_results"]),
            stand_in_model=bool(options["stand_in_model"]),
        )
        points = (
            [p.strip() for p in str(options["points"]).split(",") if p.strip()]
            if options["points"]
            else crashpoints.PLANNED
        )
        _ready_database()
        try:
            run_input = check_input_text(str(options["input"]))
            test = _test(str(options["agent"]), run_input, points, bool(options["langgraph"]))
            report = crashtest.run_many([test], settings, progress=self.stderr)[0]
        except (CrashTestError, DurableRunsError) as exc:
            raise CommandError(str(exc)) from None
        report.write(self.stdout)
        if not report.ok:
            raise CommandError("crashtest failed: duplicate executions, lost or diverged runs")


def _ready_database() -> None:
    """The embedded default (SQLite in var/) is migrated here, as `make demo` does, so a
    fresh clone can crash-test at once; a configured database is left to its owner."""
    executor = MigrationExecutor(connection)
    if not executor.migration_plan(executor.loader.graph.leaf_nodes()):
        return
    if connection.vendor != "sqlite":
        raise CommandError("the database is not migrated: run `manage.py migrate` first")
    call_command("migrate", interactive=False, verbosity=0)


def _test(
    agent: str, run_input: dict, points: Sequence[str], langgraph: bool
) -> crashtest.CrashTest:
    if not langgraph:
        return crashtest.CrashTest(agent, run_input, points)
    from durableruns.langgraph.resume import UnknownGraph
    from durableruns.testing.crashtest.graphs import POINTS, GraphCrashTest

    try:
        return GraphCrashTest(agent, run_input, points if points != crashpoints.PLANNED else POINTS)
    except UnknownGraph as exc:
        raise CommandError(str(exc)) from None
