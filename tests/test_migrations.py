"""One straight migration line: 0001_initial plus the audit trigger, nothing pending."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_the_models_need_no_new_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_history_is_one_straight_line():
    names = sorted(p.stem for p in (ROOT / "durableruns" / "migrations").glob("0*.py"))
    numbers = [name[:4] for name in names]
    assert numbers == [f"{n:04d}" for n in range(1, len(names) + 1)], names


def test_a_fresh_sqlite_database_migrates(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
