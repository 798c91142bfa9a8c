from __future__ import annotations

import logging

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate


class DurableRunsConfig(AppConfig):
    name = "durableruns"
    verbose_name = "durableruns"

    def ready(self) -> None:
        from . import roles
        from .engine import registry
        from .services import approvals  # noqa: F401 - connects the reviewer mail receiver

        post_migrate.connect(roles.ensure_groups, sender=self)
        self._check_encryption_keys()
        self._watch_redaction_rules()
        registry.load_agent_modules(settings.DURABLERUNS_AGENT_MODULES)
        if not settings.DURABLERUNS_AGENT_MODULES:
            logging.getLogger(__name__).warning(
                "no agent modules configured: set DURABLERUNS_AGENT_MODULES to the modules "
                "that register your agents; until then no run can start"
            )

    def _check_encryption_keys(self) -> None:
        """A malformed DURABLERUNS_ENCRYPTION_KEYS stops every process at start-up, clearly."""
        from django.core.exceptions import ImproperlyConfigured

        from .engine import vault
        from .engine.errors import SecretsUnavailable

        try:
            vault.check_keys()
        except SecretsUnavailable as exc:
            raise ImproperlyConfigured(exc.message) from None

    def _watch_redaction_rules(self) -> None:
        """Every process drops its cached redaction rules when an admin changes one."""
        from django.db import transaction
        from django.db.models.signals import post_delete, post_save

        from .engine.redaction import rules_changed
        from .models import RedactionRule

        def changed(**kwargs: object) -> None:
            # Now, for this process's own next write; and once the change is visible
            # to the others, so a copy they read before it is not taken (secret_text).
            rules_changed()
            transaction.on_commit(rules_changed)

        post_save.connect(changed, sender=RedactionRule, weak=False)
        post_delete.connect(changed, sender=RedactionRule, weak=False)
