from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.models import Run
from durableruns.services.exports import export_run


class Command(BaseCommand):
    help = "Print one JSON document with the run, its steps and its effects."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")

    def handle(self, *args: object, **options: object) -> None:
        try:
            run = Run.objects.get(pk=options["run_id"])
        except Run.DoesNotExist:
            raise CommandError(f"no run {options['run_id']!r}") from None
        self.stdout.write(json.dumps(export_run(run), indent=2, sort_keys=True))
