from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from durableruns.models import RetentionPolicy
from durableruns.services import retention


class Command(BaseCommand):
    help = "Apply every enabled retention policy now (what Celery beat does on a schedule)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="count what would be deleted or redacted; change nothing",
        )

    def handle(self, *args: object, **options: object) -> None:
        dry_run = bool(options["dry_run"])
        if dry_run:
            policies = RetentionPolicy.objects.filter(enabled=True)
            self.stdout.write(str(retention.preview(policies)))
        for sweep in retention.apply_all(dry_run=dry_run, triggered_by="apply_retention"):
            verb = (
                f"would {sweep.action}"
                if dry_run
                else {"delete": "deleted", "redact": "redacted"}[sweep.action]
            )
            self.stdout.write(
                f"{sweep.policy_name}: {verb} {sweep.runs_affected} runs "
                f"({sweep.batches} batches, {sweep.duration_ms:.0f} ms)"
            )
