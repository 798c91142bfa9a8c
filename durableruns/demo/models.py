"""State of the local stand-in providers: what they really executed, and when."""

from __future__ import annotations

from django.db import models


class ProviderCall(models.Model):
    """One request a stand-in provider handled. `executed` rows are real side effects."""

    class Outcome(models.TextChoices):
        EXECUTED = "executed"
        REJECTED = "rejected"  # an injected transient failure: nothing happened

    provider = models.CharField(max_length=20)
    mode = models.CharField(max_length=10)
    idempotency_key = models.CharField(max_length=255, db_index=True)
    payload = models.JSONField()
    response = models.JSONField(null=True)
    outcome = models.CharField(max_length=10, choices=Outcome, default=Outcome.EXECUTED)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.provider}/{self.mode} {self.idempotency_key} {self.outcome}"


class ModelCall(models.Model):
    """One completion the scripted model really produced (a paid call, in real life)."""

    agent = models.CharField(max_length=100)
    step = models.CharField(max_length=100)
    idempotency_key = models.CharField(max_length=255, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.agent}/{self.step}"
