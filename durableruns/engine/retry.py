"""Exponential backoff with full jitter, the engine's one retry layer (invariant 12)."""

from __future__ import annotations

import random

from django.conf import settings


def backoff_seconds(attempt: int) -> float:
    """Delay before attempt `attempt + 1`: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    ceiling = min(
        settings.DURABLERUNS_RETRY_MAX_DELAY,
        settings.DURABLERUNS_RETRY_BASE_DELAY * 2 ** (attempt - 1),
    )
    return random.uniform(0, ceiling)


def max_attempts() -> int:
    return settings.DURABLERUNS_RETRY_MAX_ATTEMPTS
