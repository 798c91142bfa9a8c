from __future__ import annotations

import getpass
import hashlib
import json
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.services.exports import ExportError, import_run


class Command(BaseCommand):
    help = (
        "Create a run from a document written by exportrun (FILE, or - for standard input). "
        "Importing the same run again changes nothing. The file is untrusted: effect keys "
        "must be the run's own, an unfinished run's approvals are asked again and it waits "
        "for a person (queued or running runs are imported as waiting). Audited."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")
        parser.add_argument(
            "--user", help="the username the import is audited as (default: the system)"
        )

    def handle(self, *args: object, **options: object) -> None:
        path = str(options["file"])
        user = _user(options["user"])
        try:
            data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
            doc = json.loads(data)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        except RecursionError:
            raise CommandError(f"{path} is nested too deeply to be an exported run") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path} is not JSON: {exc}") from None
        try:
            run, created = import_run(
                doc, user=user, digest=hashlib.sha256(data).hexdigest(), via=_via()
            )
        except ExportError as exc:
            raise CommandError(f"not imported: {exc}") from None
        self.stdout.write(run.id)
        if not created:
            self.stderr.write(f"run {run.id} already exists; nothing imported")


def _via() -> str:
    try:
        return f"manage.py importrun, OS user {getpass.getuser()}"
    except (OSError, KeyError):  # no name for this uid (a container)
        return "manage.py importrun"


def _user(username: object) -> object:
    if username is None:
        return None  # audited as "system"; the after-state names the OS account
    found = get_user_model().objects.filter(username=username).first()
    if found is None:
        raise CommandError(f"no user {username!r}")
    return found
