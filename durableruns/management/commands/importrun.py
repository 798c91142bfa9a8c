from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.services.exports import ExportError, import_run


class Command(BaseCommand):
    help = (
        "Create a run from a document written by exportrun (FILE, or - for standard input). "
        "Importing the same run again changes nothing. A run that was queued or running "
        "is imported as waiting, so nothing executes until an operator resumes it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")

    def handle(self, *args: object, **options: object) -> None:
        path = str(options["file"])
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            doc = json.loads(text)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not JSON: {exc}") from None
        try:
            run, created = import_run(doc)
        except ExportError as exc:
            raise CommandError(f"not imported: {exc}") from None
        self.stdout.write(run.id)
        if not created:
            self.stderr.write(f"run {run.id} already exists; nothing imported")
