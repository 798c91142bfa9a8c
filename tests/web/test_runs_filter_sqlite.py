"""The runs list's JSON input filter on SQLite, the embedded default.

SQLite has no JSON containment, so the filter falls back to one equality per top-level
key (web/filters._input_contains). The test migrates a fresh SQLite file and asks the
runs list in a separate process: the rest of the suite runs on Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = r"""
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from durableruns import roles
from durableruns.models import Run

inputs = {
    "a1": {"order_id": "A-1", "channel": "email", "amount": 10, "meta": {"vip": True}},
    "a2": {"order_id": "A-2", "channel": "email", "amount": 20, "meta": {"vip": False}},
    "a3": {"order_id": "A-3", "channel": "web", "amount": 10},
}
for run_id, value in inputs.items():
    Run.objects.create(
        id=run_id, agent="demo", agent_version="1", input=value, status="succeeded",
        max_steps=10, max_duration_seconds=60, finished_at=timezone.now(),
    )
user = get_user_model().objects.create_user("op", password="x")
roles.grant(user, roles.OPERATOR)
client = Client()
client.force_login(user)
found = {}
for wanted in json.loads(sys.argv[1]):
    response = client.get("/", {"input": wanted})
    html = response.content.decode()
    shown = sorted(r for r in inputs if f'href="/runs/{r}/"' in html)
    found[wanted] = [response.status_code, shown]
print(json.dumps(found))
"""

CASES = {
    '{"order_id": "A-1"}': [200, ["a1"]],
    '{"channel": "email"}': [200, ["a1", "a2"]],
    '{"channel": "email", "amount": 10}': [200, ["a1"]],
    '{"amount": 10}': [200, ["a1", "a3"]],
    '{"meta": {"vip": true}}': [200, ["a1"]],
    '{"channel": "fax"}': [200, []],
    '{"order_id": "A-1", "channel": "web"}': [200, []],
    "[1, 2]": [400, []],
    "not json": [400, []],
}


def test_the_input_filter_falls_back_to_key_equality_on_sqlite(tmp_path):
    assert _on_fresh_sqlite(tmp_path, SCRIPT, json.dumps(list(CASES))) == CASES


def _on_fresh_sqlite(tmp_path: Path, script: str, *args: str):  # type: ignore[no-untyped-def]
    """Migrate a fresh SQLite file, run `script` against it, return its last line's JSON."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    env.pop("REDIS_URL", None)
    env["DJANGO_SETTINGS_MODULE"] = "durableruns.settings"
    env["DURABLERUNS_VAR_DIR"] = str(tmp_path / "var")
    migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
    for command in (migrate, [sys.executable, "-c", script, *args]):
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


LIVE_SCRIPT = r"""
import json, re
import django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from durableruns import roles
from durableruns.models import Run, Step

run = Run.objects.create(
    id="live", agent="demo", agent_version="1", input={}, status="running",
    max_steps=10, max_duration_seconds=60, started_at=timezone.now(),
)
user = get_user_model().objects.create_user("op", password="x")
roles.grant(user, roles.OPERATOR)
client = Client()
client.force_login(user)

def poll(version):
    return client.get("/runs/live/", headers={"HX-Request": "true", "X-Live-Version": version})

first = client.get("/runs/live/")
version = re.search(r'"X-Live-Version": "([0-9a-f]+)"', first.content.decode()).group(1)
unchanged = poll(version)
now = timezone.now()
Step.objects.create(run=run, position=0, step_id="0-s", kind="step", name="s",
                    started_at=now, finished_at=now)
changed = poll(version)
print(json.dumps([first.status_code, unchanged.status_code, changed.status_code,
                  version not in changed.content.decode()]))
"""


def test_a_live_poll_answers_204_until_the_run_changes_on_sqlite(tmp_path):
    """The run page's version query is built once and run as SQL (web/live.py)."""
    assert _on_fresh_sqlite(tmp_path, LIVE_SCRIPT) == [200, 204, 200, True]
