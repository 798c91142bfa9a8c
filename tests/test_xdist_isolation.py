"""A process a test spawns imports tests.conftest again with the worker's environment:
it must keep the worker's Redis db, not add the worker's index a second time (with five
workers, gw4's spawned processes asked for db 18 of Redis's 16 and died)."""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import ROOT

_SHOW = "import os, tests.conftest; print(os.environ['REDIS_URL'])"
# The "worker" imports conftest, then spawns a process of its own that imports it again.
_WORKER = (
    "import os, subprocess, sys, tests.conftest; print(os.environ['REDIS_URL']); "
    f"print(subprocess.run([sys.executable, '-c', {_SHOW!r}], capture_output=True, "
    "text=True, check=True).stdout.strip())"
)


def test_a_spawned_process_keeps_its_workers_redis_db():
    base = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    env = {
        **os.environ,
        "REDIS_URL": urlunsplit(base._replace(path="/1")),
        "PYTEST_XDIST_WORKER": "gw2",
    }
    env.pop("DURABLERUNS_TEST_REDIS_ISOLATED", None)
    shown = subprocess.run(
        [sys.executable, "-c", _WORKER], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    worker_url, spawned_url = shown.stdout.split()
    assert urlsplit(worker_url).path == "/3"
    assert spawned_url == worker_url
