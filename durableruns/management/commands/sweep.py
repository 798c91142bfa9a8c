from __future__ import annotations

from django.core.management.base import BaseCommand

from durableruns.services.sweeper import sweep


class Command(BaseCommand):
    help = "Ring the doorbell of every run whose lease expired or whose wake-up is due."

    def handle(self, *args: object, **options: object) -> None:
        self.stdout.write(f"rang {sweep()} run(s)")
