from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate


class DurableRunsConfig(AppConfig):
    name = "durableruns"
    verbose_name = "durableruns"

    def ready(self) -> None:
        from . import roles
        from .engine import registry

        post_migrate.connect(roles.ensure_groups, sender=self)
        registry.load_agent_modules(settings.DURABLERUNS_AGENT_MODULES)
