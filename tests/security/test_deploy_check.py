"""The production settings pass Django's deployment checklist with nothing to report."""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet

from tests.conftest import ROOT
from tests.deploy.environ import deployment_environ as _deployment_environ


def _production_env(**extra: str) -> dict[str, str]:
    return {
        **_deployment_environ(),
        "DJANGO_SETTINGS_MODULE": "durableruns.settings_production",
        "SECRET_KEY": secrets.token_urlsafe(60),
        "DURABLERUNS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
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


@pytest.mark.parametrize("keys", ["", "not-a-fernet-key"])
def test_production_settings_refuse_to_start_without_their_own_encryption_keys(keys):
    """Otherwise sealed secrets fall back to a key derived from SECRET_KEY."""
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=_production_env(DURABLERUNS_ENCRYPTION_KEYS=keys),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "DURABLERUNS_ENCRYPTION_KEYS" in result.stderr
    assert "manage.py newsecretkey" in result.stderr


_PROTO_PROBE = """
import django
django.setup()
from django.test import RequestFactory
print(RequestFactory().get("/login/", headers={"X-Forwarded-Proto": "https"}).is_secure())
"""


@pytest.mark.parametrize(("proxies", "secure"), [("0", False), ("1", True)])
def test_x_forwarded_proto_is_trusted_only_behind_configured_proxies(proxies, secure):
    """With no proxy configured, gunicorn faces clients: their X-Forwarded-Proto is
    their own claim, so plain HTTP stays plain HTTP (and is redirected to HTTPS)."""
    env = _production_env(ALLOWED_HOSTS="testserver", DURABLERUNS_TRUSTED_PROXIES=proxies)
    result = subprocess.run(
        [sys.executable, "-c", _PROTO_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == str(secure)
