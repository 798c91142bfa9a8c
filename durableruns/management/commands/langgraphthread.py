"""`manage.py langgraphthread export RUN_ID` prints a LangGraph thread as JSON;
`manage.py langgraphthread import FILE [--thread-id ID]` stores one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from durableruns.models import Run
from durableruns.services import audit


class Command(BaseCommand):
    help = "Export or import a LangGraph thread (checkpoints, channel values, writes)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["export", "import"])
        parser.add_argument("target", help="RUN_ID to export, or FILE to import ('-': stdin)")
        parser.add_argument("--thread-id", help="import under this thread id (a new one)")
        parser.add_argument("--user", help="the username an import is audited as")

    def handle(self, *args: Any, **options: Any) -> None:
        from durableruns.langgraph.transfer import ImportRefused, export_thread, import_thread

        try:
            if options["action"] == "export":
                run = Run.objects.filter(pk=options["target"]).first()
                if run is None:
                    raise CommandError(f"no run {options['target']!r}")
                self.stdout.write(json.dumps(export_thread(run)))
                return
            user = _user(options["user"])
            data = Path(options["target"]).read_bytes()
            doc = json.loads(data)
            with transaction.atomic():
                run_id = import_thread(doc, thread_id=options["thread_id"])
                after = {"sha256": hashlib.sha256(data).hexdigest(), "via": "langgraphthread"}
                audit.record(user, "langgraph.import", Run.objects.get(pk=run_id), after=after)
        except RecursionError:
            raise CommandError("the file is nested too deeply to be a thread export") from None
        except (ImportRefused, ValueError, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(run_id)


def _user(username: str | None) -> Any:
    if username is None:
        return None  # audited as "system"
    found = get_user_model().objects.filter(username=username).first()
    if found is None:
        raise CommandError(f"no user {username!r}")
    return found
