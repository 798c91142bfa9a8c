from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns.engine.errors import DurableRunsError
from durableruns.models import Effect
from durableruns.services import escalations


class Command(BaseCommand):
    help = (
        "Resolve an escalated effect whose outcome is unknown: it happened (with the result "
        "the call returned), it did not happen (call again with the same key), or abort the run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("effect_id", type=int)
        parser.add_argument("resolution", choices=Effect.Resolution.values)
        parser.add_argument("--result", help="with 'happened': what the call returned, as JSON")
        parser.add_argument("--note", default="", help="why you decided so (kept with the effect)")
        parser.add_argument("--user", required=True, help="the operator deciding (a username)")

    def handle(self, *args: object, **options: object) -> None:
        user = _user(str(options["user"]))
        effect = Effect.objects.filter(pk=options["effect_id"]).first()
        if effect is None:
            raise CommandError(f"no effect {options['effect_id']}")
        try:
            result = (
                None
                if options["result"] is None
                else escalations.parse_result(str(options["result"]))
            )
            effect = escalations.resolve(
                effect,
                str(options["resolution"]),
                user=user,
                result=result,
                note=str(options["note"]),
            )
        except PermissionDenied as exc:
            who = user.get_username()
            raise CommandError(f"{who} may not resolve escalations ({exc})") from None
        except DurableRunsError as exc:
            raise CommandError(str(exc)) from None
        run = effect.run
        run.refresh_from_db()
        self.stdout.write(
            f"effect {effect.pk} ({effect.idempotency_key}) resolved as {effect.resolution} by "
            f"{effect.resolved_by.get_username()}; run {run.id} is {run.status}"
        )


def _user(username: str) -> Any:
    try:
        return get_user_model().objects.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"no user {username!r}") from None
