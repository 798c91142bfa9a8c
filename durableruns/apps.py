from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class DurableRunsConfig(AppConfig):
    name = "durableruns"
    verbose_name = "durableruns"

    def ready(self) -> None:
        from .engine import registry

        registry.load_agent_modules(settings.DURABLERUNS_AGENT_MODULES)
