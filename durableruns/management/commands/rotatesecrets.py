"""Re-encrypt every row's sealed secrets with the newest key, in short batches, so
an old key can then be dropped from DURABLERUNS_ENCRYPTION_KEYS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from durableruns.engine import vault
from durableruns.models import Approval, Effect, Run, Step

BATCH = 500


class Command(BaseCommand):
    help = "Re-encrypt stored secrets with the newest DURABLERUNS_ENCRYPTION_KEYS key."

    def handle(self, *args: Any, **options: Any) -> None:
        for model in (Run, Step, Effect, Approval):
            count = _rotate(model)
            self.stdout.write(f"{model._meta.model_name}: {count} rows re-encrypted")


def _rotate(model: Any) -> int:
    done, after = 0, None
    while True:
        rows = model.objects.exclude(secrets="").order_by("pk")
        if after is not None:
            rows = rows.filter(pk__gt=after)
        batch = list(rows.values_list("pk", "secrets")[:BATCH])
        if not batch:
            return done
        with transaction.atomic():
            for pk, token in batch:
                # Conditional: a row whose secrets changed meanwhile keeps the newer ones.
                model.objects.filter(pk=pk, secrets=token).update(secrets=vault.rotate(token))
        done += len(batch)
        after = batch[-1][0]
