from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...services import tokens


class Command(BaseCommand):
    help = (
        "Issue an API token for USERNAME and print it (shown once: only its digest is "
        "stored). --rotate revokes the user's other tokens."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="what the token is for")
        parser.add_argument("--days", type=int, default=tokens.DEFAULT_DAYS, help="lifetime")
        parser.add_argument("--rotate", action="store_true", help="revoke the old tokens")

    def handle(self, *args: object, **options: object) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        if options["rotate"]:
            for row in tokens.of_user(user).filter(tokens.live()):
                tokens.revoke(row.prefix)
        try:
            token = tokens.issue(user, name=str(options["name"]), days=int(options["days"]))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(token)
