"""Print a new key for DURABLERUNS_ENCRYPTION_KEYS (put it first in the list)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from durableruns.engine import vault


class Command(BaseCommand):
    help = "Print a new Fernet key for DURABLERUNS_ENCRYPTION_KEYS (newest first)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(vault.new_key())
