"""The production settings, served by gunicorn with a Celery worker on this machine
(local Postgres and Redis), complete a demo run end to end."""

from __future__ import annotations

import re
import secrets
import socket
import subprocess
import sys
import uuid

import httpx
import pytest
from cryptography.fernet import Fernet
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection

from durableruns.models import Run
from tests.conftest import ROOT, Processes, wait_for
from tests.deploy.environ import deployment_environ as _deployment_environ

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]
HTTPS = {"X-Forwarded-Proto": "https"}  # what the TLS-terminating proxy adds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def stack(tmp_path, settings, live_server):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    db = connection.settings_dict
    queue = f"prod-{uuid.uuid4().hex[:8]}"
    env = {
        **_deployment_environ(),
        "DJANGO_SETTINGS_MODULE": "durableruns.settings_production",
        "SECRET_KEY": secrets.token_urlsafe(60),
        "DURABLERUNS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        # The test stands in for the TLS proxy (it sends X-Forwarded-Proto), as compose's.
        "DURABLERUNS_TRUSTED_PROXIES": "1",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.CELERY_BROKER_URL,
        "DURABLERUNS_QUEUE": queue,
        # Production runs no demo: its agents are named here, and its stand-in
        # providers are served by the test's own server (never under production settings).
        "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents",
        "DURABLERUNS_PROVIDER_URL": live_server.url,
        "DURABLERUNS_METRICS_TOKEN": "prod-metrics-token",
        "DURABLERUNS_LOG_FORMAT": "json",
        "STATIC_ROOT": str(tmp_path / "static"),
        "DURABLERUNS_VAR_DIR": str(tmp_path / "var"),
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    (tmp_path / "logs").mkdir()
    procs = Processes(env, tmp_path / "logs")
    log = (tmp_path / "logs" / "gunicorn.log").open("wb")
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "durableruns.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--access-logfile",
            "-",
            "--logger-class",
            "durableruns.logs.GunicornLogger",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    procs.procs.append(web)
    procs.worker()
    wait_for(lambda: _up(base), timeout=60, message="gunicorn to answer")
    yield base, procs
    procs.stop_all()


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Browser:
    """Keeps cookies by hand: the production cookies are Secure, and the proxy (not
    this client) speaks TLS, so an ordinary cookie jar would never send them back."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies: dict[str, str] = {}
        self.set_cookie_headers: list[str] = []

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        host = self.base.removeprefix("http://")
        headers = {**HTTPS, "Origin": f"https://{host}", **kwargs.pop("headers", {})}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        response = httpx.request(method, self.base + path, headers=headers, timeout=10, **kwargs)
        for raw in response.headers.get_list("set-cookie"):
            self.set_cookie_headers.append(raw)
            name, value = raw.split(";", 1)[0].split("=", 1)
            self.cookies[name] = value
        return response

    def login(self, username: str, password: str) -> None:
        page = self.request("GET", "/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = self.request(
            "POST",
            "/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
        )
        assert response.status_code == 302, response.text[:500]


def _start_demo_run(browser: Browser) -> str:
    """Through the JSON API, as a logged-in browser session (with its CSRF token)."""
    run_input = {"order_id": "A-1001", "payments": "dedupe", "email": "dedupe"}
    response = browser.request(
        "POST",
        "/api/runs/",
        json={"agent": "refund-bot", "input": run_input},
        headers={"X-CSRFToken": browser.cookies.get("csrftoken", "")},
    )
    assert response.status_code in (200, 201, 202), response.text[:500]
    return response.json()["id"]


def test_it_completes_a_demo_run_under_gunicorn_with_production_settings(stack, carol):
    base, procs = stack
    # Healthy once a worker's sweep leader has swept (within an interval of start-up).
    health = wait_for(
        lambda: (r := httpx.get(f"{base}/healthz", timeout=5)).status_code == 200 and r,
        timeout=30,
        message="/healthz to be healthy",
    )
    body = health.json()
    assert (body["database"], body["broker"], body["sweeper"]) == ("ok", "ok", "ok")
    # Plain HTTP from outside the proxy is sent to HTTPS.
    assert httpx.get(f"{base}/", timeout=5).status_code == 301

    # The suite hashes passwords with a fast test-only hasher that production does not
    # accept; give carol a hash the production settings can check.
    carol.password = PBKDF2PasswordHasher().encode("carol-password-1", "production-salt")
    carol.save(update_fields=["password"])
    browser = Browser(base)
    browser.login("carol", "carol-password-1")
    session_cookie = next(c for c in browser.set_cookie_headers if c.startswith("sessionid="))
    assert "Secure" in session_cookie and "HttpOnly" in session_cookie

    run_id = _start_demo_run(browser)
    wait_for(
        lambda: Run.objects.filter(pk=run_id, status__in=Run.TERMINAL).exists(),
        timeout=90,
        message="the demo run to finish",
    )
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.SUCCEEDED, (run.error, procs.logs())

    page = browser.request("GET", f"/runs/{run_id}/")
    assert page.status_code == 200 and "Succeeded" in page.text
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["Strict-Transport-Security"].startswith("max-age=31536000")
    stylesheet = re.search(r'href="(/static/durableruns/app\.[0-9a-f]+\.css)"', page.text)
    assert stylesheet, "WhiteNoise's hashed static file names are in the page"
    css = httpx.get(base + stylesheet.group(1), headers=HTTPS, timeout=5)
    assert css.status_code == 200 and "max-age" in css.headers["Cache-Control"]

    metrics = httpx.get(
        f"{base}/metrics", timeout=5, headers={"Authorization": "Bearer prod-metrics-token"}
    )
    assert 'durableruns_runs{status="succeeded"} 1.0' in metrics.text
    worker_log = next(procs.log_dir.glob("worker-*.log")).read_text()
    assert f'"run_id": "{run_id}"' in worker_log, "structured logs carry the run id"
