"""The documented production settings for the team load benchmark, with one change:
passwords hashed with few PBKDF2 iterations, so that logging 320 real users in through
the login form costs seconds, not minutes of CPU (logins are not what is measured)."""

from __future__ import annotations

from durableruns.settings_production import *  # noqa: F403

PASSWORD_HASHERS = ["benchmarks.bench_hasher.BenchPasswordHasher"]
