"""The environment a deployed process gets: this one's, minus test-only switches."""

from __future__ import annotations

import os

# Set by browser tests in this process; a deployment must never have it.
TEST_ONLY = ("DJANGO_ALLOW_ASYNC_UNSAFE",)


def deployment_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in TEST_ONLY}
