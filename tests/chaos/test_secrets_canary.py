"""The secrets canary: secrets in a run's input, tool arguments, tool results, model
replies and exception messages (and log lines) reach neither the database (a
pg_dump), nor the worker logs, nor gunicorn's access and error logs (a real gunicorn
serving requests whose query strings, Referer and request line carry them), nor Redis
(every command sent to a private redis-server, captured with MONITOR) — while the run
still works."""

from __future__ import annotations

import base64
import json
import random
import secrets
import shutil
import socket
import string
import subprocess
import sys

import httpx
import pytest
from django.db import connection

from durableruns.models import RedactionRule, Run
from tests.conftest import ROOT, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def _token(n: int = 24) -> str:
    return "".join(random.choices(string.ascii_letters + string.digits, k=n))


def _luhn_card() -> str:
    digits = [4] + [random.randint(0, 9) for _ in range(14)]
    total = 0
    for index, digit in enumerate(reversed(digits)):
        total += (digit * 2 - 9 if digit > 4 else digit * 2) if index % 2 == 0 else digit
    return "".join(map(str, digits)) + str((10 - total % 10) % 10)


def _canaries() -> dict[str, str]:
    canaries = _canary_values()
    canaries["multiword_tail"] = canaries["multiword_password"].split()[2]
    return canaries


def _canary_values() -> dict[str, str]:
    return {
        "input_key": _token(),  # under "api_key" in the input
        "input_pattern": f"sk_live_{_token()}",  # free text in the input
        "arg_password": _token(),  # a "password" argument, and logged
        "arg_bearer": _token(32),  # "Bearer ..." in a header argument
        "result_token": _token(),  # "access_token" in a tool result
        "result_pattern": f"sk_test_{_token()}",  # free text in a tool result
        "model_secret": f"canary-{secrets.token_hex(12)}",  # an admin's pattern; model reply
        "exception_key": f"sk_live_{_token()}",  # in a tool's exception message
        "fail_token": _token(),  # "token=..." in an uncaught exception
        "fail_card": _luhn_card(),  # a card number in the same message
        # Issue 11's shapes (tests/agents_canary.py: shapes()), through a tool and back.
        "camel_access": _token(),
        "camel_client": _token(),
        "camel_private": _token(),
        "aws_secret": _token(40),
        "aws_secret_text": _token(40),
        "card_number": _luhn_card(),  # sent as a JSON number
        "basic_auth": base64.b64encode(f"svc:{_token()}".encode()).decode(),
        "multiword_password": f"correct horse {_token(10)} staple",
        "multiword_tail": "",  # filled below: the password's third word alone
        "github": "ghp_" + _token(36),
        "slack": f"xoxb-{random.randint(10**11, 10**12 - 1)}-{_token(24)}",
        "db_password": _token(),
        "pem_body": _token(64),
        "jwt_signature": _token(43),
        "query_key": _token(),
        "query_password": _token(),
        "query_own_token": f"dr_{secrets.token_hex(6)}_{_token(43)}",  # any parameter
        "query_encoded": _token(),  # as password%3D...
        # Issue 22's shapes (tests/agents_canary.py: shapes()), through a tool and back.
        **{f"key_{name}": _token() for name in KEY_NAMES_22},
        "pair_value": _token(),
        "said_password": _token(),
        "said_tail": _token(),
        "multiline_password": f"{_token()}\n{_token()}",
        "aws_context": _token(40),
        "github_classic": secrets.token_hex(20),
        "xapp": f"xapp-1-A{random.randint(10**9, 10**10 - 1)}-{random.randint(10**12, 10**13 - 1)}"
        f"-{secrets.token_hex(32)}",
        "google": "AIza" + _token(35),
        "huggingface": "hf_" + "".join(random.choices(string.ascii_letters, k=34)),
        "gitlab": "glpat-" + _token(20),
        "npm": "npm_" + _token(36),
        "sendgrid": f"SG.{_token(22)}.{_token(43)}",
        "twilio": "SK" + secrets.token_hex(16),
        "azure_key": base64.b64encode(secrets.token_bytes(64)).decode(),
        "url_password": f"{_token(8)}/{_token(8)}@{_token(8)}",
        "card_dots": ".".join(_chunks(_luhn_card())),
        "card_spaces": "  ".join(_chunks(_luhn_card())),
        "own_token": f"dr_{secrets.token_hex(6)}_{_token(43)}",
    }


KEY_NAMES_22 = (
    "DBPassword",
    "adminpassword",
    "APIToken",
    "PassWord",
    "pwd",
    "credentials",
    "ssh_key",
    "AccountKey",
    "accessKey",
    "auth",
    "db-password",
)


def _chunks(card: str) -> list[str]:
    return [card[i : i + 4] for i in range(0, len(card), 4)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def private_redis(tmp_path, settings):
    """A redis-server of our own, with every command it receives written to a file."""
    port = _free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    wait_for(
        lambda: (
            subprocess.run(
                ["redis-cli", "-p", str(port), "ping"], capture_output=True
            ).stdout.strip()
            == b"PONG"
        ),
        timeout=10,
        message="private redis",
    )
    capture = tmp_path / "redis-monitor.txt"
    monitor = subprocess.Popen(
        ["redis-cli", "-p", str(port), "monitor"], stdout=capture.open("wb"), start_new_session=True
    )
    wait_for(
        lambda: capture.exists() and b"OK" in capture.read_bytes(),
        timeout=10,
        message="MONITOR to start",
    )
    settings.CELERY_BROKER_URL = url  # the `processes` fixture hands it to the workers
    yield url, capture
    monitor.kill()
    server.kill()
    monitor.wait()
    server.wait()


def _gunicorn(processes) -> str:
    """gunicorn as deployed (Dockerfile: --logger-class durableruns.logs.GunicornLogger),
    its access and error logs in files beside the workers' logs, at debug level."""
    port = _free_port()
    logs = processes.log_dir
    web = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "durableruns.wsgi:application"),
            *("--bind", f"127.0.0.1:{port}", "--workers", "1", "--log-level", "debug"),
            *("--access-logfile", str(logs / "gunicorn-access.log")),
            *("--error-logfile", str(logs / "gunicorn-error.log")),
            *("--logger-class", "durableruns.logs.GunicornLogger"),
        ],
        cwd=ROOT,
        env=processes.env,
        stdout=(logs / "gunicorn-stdout.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    processes.procs.append(web)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(base), timeout=60, message="gunicorn to answer")
    return base


def _answers(base: str) -> bool:
    try:
        httpx.get(f"{base}/healthz", timeout=2)
    except httpx.HTTPError:
        return False
    return True


def _requests_with_secrets(base: str, canaries: dict[str, str]) -> None:
    """What a careless client sends: secrets in query strings, a Referer, and a
    request line gunicorn refuses (which its error log quotes)."""
    key, password = canaries["query_key"], canaries["query_password"]
    query = f"api_key={key}&password={password}&page=2"
    httpx.get(f"{base}/healthz?{query}", timeout=10)
    own, encoded = canaries["query_own_token"], canaries["query_encoded"]
    httpx.get(f"{base}/healthz?whatever={own}&q=password%3D{encoded}", timeout=10)
    httpx.get(
        f"{base}/api/runs/?{query}",
        headers={"Referer": f"https://intranet.example/?api_key={key}"},
        timeout=10,
    )
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10) as raw:
        # No HTTP version: gunicorn quotes the whole line in its error log.
        raw.sendall(f"GET /healthz?password={password}\r\n\r\n".encode())
        raw.recv(4096)


def _start(processes, agent: str, run_id: str, run_input: dict, env: dict) -> None:
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "startrun",
            agent,
            "--run-id",
            run_id,
            "--input",
            json.dumps(run_input),
        ],
        cwd=ROOT,
        env={**processes.env, **env},
        check=True,
        capture_output=True,
        timeout=60,
    )


def _pg_dump() -> str:
    db = connection.settings_dict
    result = subprocess.run(
        [
            shutil.which("pg_dump") or "pg_dump",
            "-h",
            db["HOST"],
            "-p",
            str(db["PORT"] or 5432),
            "-U",
            db["USER"],
            "--data-only",
            db["NAME"],
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout


def test_no_secret_reaches_the_database_the_logs_or_redis(private_redis, processes, tmp_path):
    url, capture = private_redis
    canaries = _canaries()
    RedactionRule.objects.create(kind="pattern", value=r"canary-[0-9a-f]{24}")
    env = {
        "CANARY_SECRETS": json.dumps(canaries),
        "REDIS_URL": url,
        "DURABLERUNS_AGENT_MODULES": "durableruns.demo.agents,tests.agents_canary",
    }
    processes.env.update(env)
    processes.worker()
    processes.beat()
    _requests_with_secrets(_gunicorn(processes), canaries)

    run_input = {
        "account": "acme",
        "api_key": canaries["input_key"],
        "note": f"use {canaries['input_pattern']} for this",
    }
    _start(processes, "canary-bot", "canary-ok", run_input, env)
    _start(processes, "canary-fail", "canary-fail", {"account": "acme"}, env)
    wait_for(
        lambda: (
            Run.objects.filter(pk__in=["canary-ok", "canary-fail"], status__in=Run.TERMINAL).count()
            == 2
        ),
        message="both canary runs to finish",
    )

    ok = Run.objects.get(pk="canary-ok")
    assert ok.status == Run.Status.SUCCEEDED, ok.error
    # The run worked with the real secrets: the tool checked them, the model echoed one.
    assert ok.result["verified"] is True and ok.result["confirmed"] is True
    assert ok.result["shapes_received"] is True  # the tool got every shape in clear
    failed = Run.objects.get(pk="canary-fail")
    assert failed.status == Run.Status.FAILED
    assert "gave up; token=[REDACTED] card [REDACTED]" in failed.error["message"]
    assert "[REDACTED]" in failed.error["traceback"]

    processes.stop_all()
    dump = _pg_dump()
    logs = "\n".join(p.read_text(errors="replace") for p in processes.log_dir.glob("*.log"))
    redis = capture.read_text(errors="replace")
    # The captures saw the runs (so 0 hits means something).
    assert "canary-ok" in dump and "canary-ok" in redis and "run=canary-ok" in logs
    assert "upstream failed with [REDACTED]" in logs
    assert "connecting with password=[REDACTED] and [REDACTED]" in logs
    # gunicorn logged the requests, without their secrets.
    access = (processes.log_dir / "gunicorn-access.log").read_text()
    assert "/healthz?api_key=[REDACTED]&password=[REDACTED]&page=2" in access
    assert "/api/runs/?api_key=" in access and "intranet.example" in access
    errors = (processes.log_dir / "gunicorn-error.log").read_text()
    assert "Invalid HTTP request line: 'GET /healthz?password=[REDACTED]'" in errors

    leaks = {
        where: sorted(name for name, secret in canaries.items() if secret in text)
        for where, text in (("database", dump), ("logs", logs), ("redis", redis))
    }
    assert leaks == {"database": [], "logs": [], "redis": []}
