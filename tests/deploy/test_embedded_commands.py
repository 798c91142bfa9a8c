"""manage.py commands on a fresh clone's embedded default (SQLite and the filesystem
broker in var/, nothing configured), as the README's first steps run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.deploy.environ import deployment_environ

pytestmark = pytest.mark.chaos


def _manage(var_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = deployment_environ()
    for name in ("DATABASE_URL", "REDIS_URL", "DURABLERUNS_QUEUE", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(DURABLERUNS_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_run_starts_on_a_fresh_var_without_broker_warnings(tmp_path):
    var_dir = tmp_path / "var"
    assert _manage(var_dir, "migrate", "-v0").returncode == 0
    started = _manage(var_dir, "startrun", "refund-bot", "--input", '{"order_id": "A-1001"}')
    output = started.stdout + started.stderr
    assert started.returncode == 0, output
    assert "Traceback" not in output
    assert "No hostname was supplied" not in output


def test_crashtest_refuses_a_baseline_that_fails_in_one_line(tmp_path):
    # Without an order id the refund agent fails on its own: nothing to crash-test.
    result = _manage(tmp_path / "var", "crashtest", "refund-bot", "--input", "{}", timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output
    assert "uninterrupted run" in result.stderr and "failed" in result.stderr, output
    assert "crash points to test" not in output


def test_crashtest_passes_on_a_fresh_clone_without_any_other_command(tmp_path):
    """On the embedded default (SQLite, filesystem broker): it migrates, starts its
    workers, kills and judges. One point (after each tool returned, where a resume
    must not repeat a write) is enough to prove that path; the whole matrix is
    tests/chaos/test_crash_matrix.py's, on Postgres (here it cost CI 140 s)."""
    result = _manage(
        tmp_path / "var",
        "crashtest",
        "refund-bot",
        "--input",
        '{"order_id": "A-1001", "payments": "none"}',
        "--workers",
        "2",
        "--pool",
        "prefork",
        "--points",
        "after_tool_returned",
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    assert "0 duplicate executions, 0 lost" in result.stdout, output[-4000:]
