from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ...services import tokens


class Command(BaseCommand):
    help = "List USERNAME's API tokens (prefix, name, state, expiry, last use); --revoke PREFIX."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--revoke", metavar="PREFIX", help="revoke this token of the user")

    def handle(self, *args: object, **options: object) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        if prefix := options["revoke"]:
            if not tokens.of_user(user).filter(prefix=prefix).exists():
                raise CommandError(f"{user.username} has no token {prefix!r}")
            tokens.revoke(str(prefix))
        now = timezone.now()
        for row in tokens.of_user(user):
            state = "revoked" if row.revoked_at else "expired" if row.expires_at <= now else "live"
            used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
            self.stdout.write(
                f"{row.prefix}  {state:<7}  expires {row.expires_at:%Y-%m-%d}  "
                f"last used {used}  {row.name}"
            )
