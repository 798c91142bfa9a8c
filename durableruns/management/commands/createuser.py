from __future__ import annotations

import getpass
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...services import users


class Command(BaseCommand):
    help = (
        "Create USERNAME with a role (reviewer, operator or admin; repeat --role for more), "
        "or add the role to an existing user. The password is asked for, read from stdin "
        "with --password-stdin, or left unusable with --no-password."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", action="append", required=True, choices=users.ROLES)
        parser.add_argument("--email", default="")
        how = parser.add_mutually_exclusive_group()
        how.add_argument("--password-stdin", action="store_true", help="read it from stdin")
        how.add_argument("--no-password", action="store_true", help="set it later")

    def handle(self, *args: object, **options: object) -> None:
        username = str(options["username"])
        try:
            user, created = users.create_or_grant(
                username,
                list(options["role"]),  # type: ignore[call-overload]
                email=str(options["email"]),
                password=self._password(username, options),
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        held = ", ".join(sorted(user.groups.values_list("name", flat=True)))
        self.stdout.write(f"{'created' if created else 'updated'} {username}: {held}")

    def _password(self, username: str, options: dict[str, object]) -> str | None:
        if options["no_password"]:
            return None
        if options["password_stdin"]:
            return sys.stdin.readline().rstrip("\n")
        from django.contrib.auth import get_user_model

        if get_user_model().objects.filter(username=username).exists():
            return None  # adding a role keeps the password the user has
        if not sys.stdin.isatty():
            raise CommandError("no terminal to ask for a password: use --password-stdin")
        first = getpass.getpass(f"password for {username}: ")
        if first != getpass.getpass("again: "):
            raise CommandError("the passwords differ")
        return first
