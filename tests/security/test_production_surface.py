"""Under the production settings and the compose file's environment, the demo is gone:
no stand-in provider is routed (404) and, with no agent modules configured, no agent
is loaded; every process says so at start-up."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys

import yaml
from cryptography.fernet import Fernet
from django.db import connection

from tests.conftest import ROOT

PROBE = """
import json, django
django.setup()
from django.test import Client
from durableruns.engine import registry
client = Client(raise_request_exception=False)
answers = {
    path: client.get(path, secure=True, HTTP_HOST="localhost").status_code
    for path in ("/providers/orders/A-1001", "/providers/search",
                 "/providers/payments/lookup/k", "/healthz")
}
print(json.dumps({"answers": answers, "agents": [a.name for a in registry.agents()]}))
"""


def _compose_environment() -> dict[str, str]:
    """The web service's environment, with ${VAR:-default} read as the default."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"]["web"]["environment"]
    return {
        name: re.sub(r"\$\{\w+:[-?]([^}]*)\}", r"\1", str(value)) for name, value in env.items()
    }


def _probe(static_root: str) -> tuple[dict, str]:
    db = connection.settings_dict
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DURABLERUNS_")},
        **_compose_environment(),
        "SECRET_KEY": secrets.token_urlsafe(60),
        # Production refuses to start without its own keys (the compose file requires them).
        "DURABLERUNS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": os.environ.get("REDIS_URL", ""),
        "STATIC_ROOT": static_root,  # the error pages need the collected manifest
    }
    assert "DURABLERUNS_AGENT_MODULES" not in env
    collect = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
    subprocess.run(collect, cwd=ROOT, env=env, check=True, timeout=120)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_production_routes_no_provider_and_loads_no_demo_agent(db, tmp_path):
    result, stderr = _probe(str(tmp_path / "static"))
    assert result["answers"]["/providers/orders/A-1001"] == 404
    assert result["answers"]["/providers/search"] == 404
    assert result["answers"]["/providers/payments/lookup/k"] == 404
    assert result["agents"] == []
    assert "no agent modules configured" in stderr


def test_the_compose_file_points_no_tool_at_the_demo_providers():
    env = _compose_environment()
    assert "DURABLERUNS_PROVIDER_URL" not in env
    assert "DURABLERUNS_AGENT_MODULES" not in env  # an image's own value must hold


def test_the_dashboard_says_when_no_agent_is_configured(client, bob, monkeypatch):
    from durableruns.engine import registry

    client.force_login(bob)
    assert 'id="no-agents"' not in client.get("/").content.decode()
    monkeypatch.setattr(registry, "agents", lambda: [])
    body = client.get("/").content.decode()
    assert 'id="no-agents"' in body and "DURABLERUNS_AGENT_MODULES" in body
