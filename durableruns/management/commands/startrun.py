from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.engine.errors import DurableRunsError
from durableruns.engine.runs import check_input_text, start_run


class Command(BaseCommand):
    help = "Start a run of AGENT (idempotent on --run-id) and print its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent")
        parser.add_argument("--input", default="{}", help="the run input, a JSON object")
        parser.add_argument("--run-id", help="a client-chosen id; repeating it starts nothing new")
        parser.add_argument("--agent-version", help="default: the newest registered version")

    def handle(self, *args: object, **options: object) -> None:
        try:
            run_input = check_input_text(str(options["input"]))
            run, created = start_run(
                str(options["agent"]),
                run_input,
                run_id=options["run_id"],
                version=options["agent_version"],
            )
        except DurableRunsError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(run.id)
        if not created:
            self.stderr.write(f"run {run.id} already exists ({run.status}); nothing started")
