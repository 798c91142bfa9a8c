"""A cheap password hasher for benchmarks that log many real users in (not measured)."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class BenchPasswordHasher(PBKDF2PasswordHasher):
    algorithm = "pbkdf2_sha256"  # the same stored format, far fewer iterations
    iterations = 1_000
