"""`manage.py langgraphthread export RUN_ID` prints a LangGraph thread as JSON;
`manage.py langgraphthread import FILE [--thread-id ID]` stores one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.models import Run


class Command(BaseCommand):
    help = "Export or import a LangGraph thread (checkpoints, channel values, writes)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["export", "import"])
        parser.add_argument("target", help="RUN_ID to export, or FILE to import ('-': stdin)")
        parser.add_argument("--thread-id", help="import under this thread id")

    def handle(self, *args: Any, **options: Any) -> None:
        from durableruns.langgraph.transfer import ImportRefused, export_thread, import_thread

        try:
            if options["action"] == "export":
                run = Run.objects.filter(pk=options["target"]).first()
                if run is None:
                    raise CommandError(f"no run {options['target']!r}")
                self.stdout.write(json.dumps(export_thread(run)))
                return
            doc = json.loads(Path(options["target"]).read_text())
            run_id = import_thread(doc, thread_id=options["thread_id"])
        except (ImportRefused, ValueError, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(run_id)
