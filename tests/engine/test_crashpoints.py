"""Arming a crash point, and the crash itself (in a throwaway process)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from durableruns.engine import crashpoints
from durableruns.engine.errors import UsageError

FIRE = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")
django.setup()
from durableruns.engine import crashpoints
crashpoints.crash_point("after_step_commit", "run-1", 2)
crashpoints.crash_point("after_step_commit", "run-1", 3)
print("survived")
"""


def test_it_arms_a_run_level_point_without_a_position(tmp_path):
    crashpoints.arm(tmp_path, "run-1", crashpoints.AFTER_RUN_FINISHED)
    assert (tmp_path / "run-1").read_text() == "after_run_finished@-1"


@pytest.mark.parametrize(
    ("point", "position", "message"),
    [
        ("after_lunch", 1, "unknown crash point"),
        (crashpoints.BEFORE_STEP, None, "needs a step position"),
        (crashpoints.AFTER_TOOL_RETURNED, -1, "needs a step position"),
        (crashpoints.AFTER_RUN_FINISHED, 3, "takes no step position"),
    ],
)
def test_it_refuses_a_crash_that_could_never_fire(tmp_path, point, position, message):
    with pytest.raises(UsageError, match=message):
        crashpoints.arm(tmp_path, "run-1", point, position)
    assert not crashpoints.is_armed(tmp_path, "run-1")


def test_it_kills_the_process_at_the_armed_point_once_and_records_it(tmp_path):
    crashpoints.arm(tmp_path, "run-1", crashpoints.AFTER_STEP_COMMIT, 3)
    env = {"DURABLERUNS_CRASH_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    killed = subprocess.run(
        [sys.executable, "-c", FIRE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "survived" not in killed.stdout
    record = crashpoints.fired(tmp_path, "run-1")
    assert (record["point"], record["position"]) == ("after_step_commit", 3)
    assert not crashpoints.is_armed(tmp_path, "run-1")

    again = subprocess.run(
        [sys.executable, "-c", FIRE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (again.returncode, again.stdout.strip()) == (0, "survived")
