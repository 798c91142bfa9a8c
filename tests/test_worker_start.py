"""What a Celery worker process does at start: the chaos suites start hundreds of them,
and a rolling deploy starts a fleet's worth at once."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.deploy.environ import deployment_environ

# What `celery -A durableruns worker` does before it consumes: import the app, then let
# Celery's Django fix-up set Django up and (unless told not to) run the system checks.
STARTS = """
import json, sys
import django.core.checks
checks, run = [], django.core.checks.run_checks
django.core.checks.run_checks = lambda *a, **k: checks.append(1) or run(*a, **k)
from durableruns.celery import app
app.loader.import_default_modules()
loaded = sorted(m for m in sys.modules if m.startswith(("durableruns.web", "durableruns.api")))
print(json.dumps({"checks": len(checks), "web": loaded}))
"""


def _last_json_line(source: str, env: dict[str, str]) -> Any:
    """Run `source` in a fresh interpreter with `env`; what its last line printed."""
    done = subprocess.run(
        [sys.executable, "-c", source],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_worker_starts_without_the_system_checks_or_the_web_layer():
    """The checks import every URL, view and API schema module: about 0.45 s of CPU, half
    a worker's start. They run once per deployment, in `manage.py migrate`."""
    env = deployment_environ()
    env.pop("CELERY_SKIP_CHECKS", None)  # this process imported the app, which sets it
    started = _last_json_line(STARTS, env)
    assert started == {"checks": 0, "web": []}


# A worker's logging once Celery applied `--loglevel=INFO` over Django's LOGGING.
LOGS = """
import json, logging
from durableruns.celery import app
app.loader.import_default_modules()
app.log.setup(loglevel="INFO")
logs = {name: logging.getLogger(name).isEnabledFor(logging.INFO)
        for name in ("celery.worker.strategy", "celery.app.trace")}
print(json.dumps(logs))
"""


@pytest.mark.parametrize(("level", "received"), [(None, False), ("INFO", True)])
def test_a_worker_logs_each_task_end_and_a_received_line_only_when_asked(level, received):
    """The consumer thread writes "received" for every doorbell, in turn, and under load
    that write slows the intake (settings.LOGGING); each task's end is still logged."""
    env = deployment_environ()
    if level:
        env["DURABLERUNS_TASK_RECEIVED_LOG_LEVEL"] = level
    logs = _last_json_line(LOGS, env)
    assert logs == {"celery.worker.strategy": received, "celery.app.trace": True}
