"""What a Celery worker process does at start: the chaos suites start hundreds of them,
and a rolling deploy starts a fleet's worth at once."""

from __future__ import annotations

import json
import subprocess
import sys

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


def test_a_worker_starts_without_the_system_checks_or_the_web_layer():
    """The checks import every URL, view and API schema module: about 0.45 s of CPU, half
    a worker's start. They run once per deployment, in `manage.py migrate`."""
    env = deployment_environ()
    env.pop("CELERY_SKIP_CHECKS", None)  # this process imported the app, which sets it
    done = subprocess.run(
        [sys.executable, "-c", STARTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout.strip().splitlines()[-1])
    assert started == {"checks": 0, "web": []}
