from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.models import Run
from durableruns.services.exports import ExportError
from durableruns.services.runs import dry_replay


class Command(BaseCommand):
    help = (
        "Dry-replay a run: re-execute its agent code against the recorded history with "
        "every tool and model call forbidden, print a step-by-step report, and exit "
        "non-zero on divergence. Writes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?", help="a run stored in this database")
        parser.add_argument("--file", help="an exported run document (see exportrun)")

    def handle(self, *args: object, **options: object) -> None:
        source = self._source(options.get("run_id"), options.get("file"))
        try:
            report = dry_replay(source)
        except ExportError as exc:
            raise CommandError(f"not a valid exported run: {exc}") from None
        for line in report.lines()[:-1]:
            self.stdout.write(line)
        if not report.ok:
            # CommandError prints to stderr and exits with status 1.
            raise CommandError(report.summary())
        self.stdout.write(report.summary())

    @staticmethod
    def _source(run_id: object, file: object) -> Run | dict:
        if bool(run_id) == bool(file):
            raise CommandError("give either RUN_ID or --file FILE")
        if run_id:
            try:
                return Run.objects.get(pk=run_id)
            except Run.DoesNotExist:
                raise CommandError(f"no run {run_id!r}") from None
        try:
            return json.loads(Path(str(file)).read_text())
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise CommandError(f"{file} is not JSON: {exc}") from None
