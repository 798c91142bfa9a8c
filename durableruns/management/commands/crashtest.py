from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

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
            "it kills the pool process, which Celery replaces at once",
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
            "--ignore-results",
            action="store_true",
            help="do not compare final results (for a non-deterministic model)",
        )

    def handle(self, *args: object, **options: object) -> None:
        if int(options["workers"]) < 1:
            raise CommandError("--workers must be at least 1")
        settings = Options(
            workers=int(options["workers"]),
            pool=str(options["pool"]),
            lease_ttl=float(options["lease_ttl"]),
            sweep_interval=float(options["sweep_interval"]),
            parallel=options["parallel"],
            run_timeout=float(options["run_timeout"]),
            ignore_results=bool(options["ignore_results"]),
        )
        try:
            run_input = check_input_text(str(options["input"]))
            report = crashtest.run(str(options["agent"]), run_input, settings, progress=self.stderr)
        except (CrashTestError, DurableRunsError) as exc:
            raise CommandError(str(exc)) from None
        report.write(self.stdout)
        if not report.ok:
            raise CommandError("crashtest failed: duplicate executions, lost or diverged runs")
