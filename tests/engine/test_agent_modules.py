"""A DURABLERUNS_AGENT_MODULES entry that does not import is named in a logged error and
stops nothing: not a worker, not `manage.py migrate`."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from django.db import connection

from durableruns.engine import registry
from tests.conftest import ROOT


def test_a_module_that_does_not_import_is_logged_with_the_setting_and_skipped(caplog):
    with caplog.at_level(logging.ERROR, logger="durableruns.engine.registry"):
        failed = registry.load_agent_modules(["tests.no_such_agents", "tests.engine.agents"])

    assert failed == ["tests.no_such_agents"]
    assert "DURABLERUNS_AGENT_MODULES names 'tests.no_such_agents'" in caplog.text
    assert registry.get_agent("t-flaky")  # the good module was still imported


@pytest.mark.django_db(transaction=True)
def test_migrate_runs_with_a_bad_agent_module():
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.no_such_agents",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert "No migrations to apply" in done.stdout
    assert "DURABLERUNS_AGENT_MODULES names 'tests.no_such_agents'" in done.stderr
    assert "Traceback" not in done.stderr
