"""The production settings pass Django's deployment checklist with nothing to report."""

from __future__ import annotations

import secrets
import subprocess
import sys

from tests.conftest import ROOT
from tests.deploy.environ import deployment_environ as _deployment_environ


def _production_env(**extra: str) -> dict[str, str]:
    return {
        **_deployment_environ(),
        "DJANGO_SETTINGS_MODULE": "durableruns.settings_production",
        "SECRET_KEY": secrets.token_urlsafe(60),
        "ALLOWED_HOSTS": "runs.example.com",
        **extra,
    }


def test_check_deploy_reports_nothing():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=_production_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_production_settings_refuse_a_weak_secret_key():
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=_production_env(SECRET_KEY="short"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
