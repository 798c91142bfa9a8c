"""docker-compose.yml is complete and says what the README says (no Docker engine
here, so the file is parsed and checked, not run)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import yaml

from tests.conftest import ROOT

SERVICES = {"postgres", "redis", "migrate", "web", "worker", "beat"}


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _readme_commands() -> dict[str, list[str] | None]:
    """The Deployment table: | `service` | `command` | role |."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Deployment", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)` \| (.+?) \| .+ \|$", section, flags=re.MULTILINE)
    return {
        name: shlex.split(cmd.strip("`")) if cmd.startswith("`") else None for name, cmd in rows
    }


def test_it_has_every_service():
    assert set(_compose()["services"]) == SERVICES


def test_each_service_runs_the_command_the_readme_documents():
    documented = _readme_commands()
    assert set(documented) == SERVICES
    for name, service in _compose()["services"].items():
        assert service.get("command") == documented[name], name


def test_postgres_and_redis_have_health_checks_the_app_waits_for():
    services = _compose()["services"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    for name in ("web", "worker", "beat"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["migrate"]["condition"] == "service_completed_successfully", name


def test_migrate_runs_once():
    migrate = _compose()["services"]["migrate"]
    assert migrate["restart"] == "no"
    assert "migrate" not in migrate["depends_on"]


def test_the_app_uses_production_settings_from_the_environment():
    for name in ("migrate", "web", "worker", "beat"):
        env = _compose()["services"][name]["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "durableruns.settings_production"
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?")  # no default secret
        assert env["DURABLERUNS_ENCRYPTION_KEYS"].startswith("${DURABLERUNS_ENCRYPTION_KEYS:?")
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")


def test_every_app_variable_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    env = _compose()["services"]["web"]["environment"]
    missing = [name for name in env if f"`{name}`" not in readme]
    assert not missing


def test_the_dockerfile_serves_gunicorn_with_collected_static_files():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "collectstatic --noinput" in dockerfile
    assert '"gunicorn", "durableruns.wsgi:application"' in dockerfile
    assert "USER durableruns" in dockerfile


def test_beat_starts_only_when_asked_for():
    """The workers sweep and schedule by default: a default `up` starts no idle beat."""
    services = _compose()["services"]
    assert services["beat"]["profiles"] == ["beat"]
    assert all("profiles" not in s for name, s in services.items() if name != "beat")


def test_gunicorn_is_reachable_only_by_the_proxy_the_settings_count():
    """Published on the host's loopback only, for the TLS proxy there: the one proxy
    DURABLERUNS_TRUSTED_PROXIES counts, so each client has its own address and a
    client cannot reach gunicorn to forge X-Forwarded-For or X-Forwarded-Proto."""
    web = _compose()["services"]["web"]
    assert web["ports"] and all(port.startswith("127.0.0.1:") for port in web["ports"])
    assert web["environment"]["DURABLERUNS_TRUSTED_PROXIES"] == "${DURABLERUNS_TRUSTED_PROXIES:-1}"


def test_the_dockerfile_collects_static_files_with_throwaway_keys_only():
    step = (ROOT / "Dockerfile").read_text().split("collectstatic-only", 1)[1].split("\n\n")[0]
    assert "DURABLERUNS_ENCRYPTION_KEYS=$(" in step and "Fernet.generate_key()" in step


def test_the_web_service_runs_threads_that_keep_their_sessions():
    """Issue 27: sync workers queued decisions behind polls, and every request opened a
    Postgres session; gthread's one pool still queued them behind polls. The image and
    the compose file start the same threaded command, with the worker that serves state
    changes first (tests/deploy/test_web_worker.py)."""
    compose = (ROOT / "docker-compose.yml").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    worker = "durableruns.web.gunicorn_worker.ThreadWorker"
    for text in (compose, dockerfile):
        assert f'"--worker-class", "{worker}", "--threads", "8"' in text
        assert '"--env", "DURABLERUNS_CONN_MAX_AGE=60"' in text


def test_the_session_age_setting_reaches_the_database_settings():
    code = (
        "from django.conf import settings; d = settings.DATABASES['default'];"
        "print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])"
    )
    env = {
        **os.environ,
        "DURABLERUNS_CONN_MAX_AGE": "60",
        "DJANGO_SETTINGS_MODULE": "durableruns.settings",
    }
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["60", "True"]


def _database_settings(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env={
            **os.environ,
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/x",
            "DJANGO_SETTINGS_MODULE": "durableruns.settings",
            **env,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def test_the_worker_shares_a_bounded_pool_of_sessions():
    """Issue 23: a thread-pool worker's runs share DURABLERUNS_DB_POOL_SIZE sessions."""
    worker = _compose()["services"]["worker"]
    assert "--pool=threads" in worker["command"]
    assert worker["environment"]["DURABLERUNS_DB_POOL_SIZE"].startswith("${DURABLERUNS_DB_POOL")
    assert "DURABLERUNS_DB_POOL_SIZE" not in _compose()["services"]["web"]["environment"]
    code = (
        "from django.conf import settings; p = settings.DATABASES['default']['OPTIONS']['pool']; "
        "print(p['min_size'], p['max_size'], p['timeout'], p['check'].__qualname__)"
    )
    out = _database_settings(code, DURABLERUNS_DB_POOL_SIZE="20")
    # Checked before reuse only after a second unused (durableruns/dbpool.py).
    assert out.stdout.split() == ["1", "20", "30.0", "check_if_idle"], out.stderr


def test_a_fresh_install_can_open_the_pool():
    """The pool is psycopg's psycopg_pool, a dependency of its own: a worker installed
    from pyproject.toml alone must be able to take a session from it (CI once had none,
    and every task of the documented worker failed)."""
    code = "from django.db import connection; print(type(connection.pool).__name__)"
    out = _database_settings(code, DURABLERUNS_DB_POOL_SIZE="2")
    assert out.stdout.split() == ["ConnectionPool"], out.stderr


def test_it_refuses_a_pool_together_with_persistent_sessions():
    out = _database_settings("", DURABLERUNS_DB_POOL_SIZE="20", DURABLERUNS_CONN_MAX_AGE="60")
    assert out.returncode != 0
    assert "DURABLERUNS_DB_POOL_SIZE and DURABLERUNS_CONN_MAX_AGE exclude each other" in out.stderr
