"""The embedded default's broker (durableruns/broker.py): a worker reading while
another process writes never takes a half-written message (kombu's own filesystem
transport hands it an empty file now and then, and Celery stops the worker)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

from kombu import Connection

from tests.conftest import ROOT
from tests.deploy.environ import deployment_environ

MESSAGES = 3000
TRANSPORT = "durableruns.broker:Transport"


def _connection(folder: Path, transport: str) -> Connection:
    (folder / "control").mkdir(exist_ok=True)
    return Connection(
        "filesystem://localhost/",
        transport=transport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "control_folder": str(folder / "control"),
            # List the folder again at once when it is empty: an idle worker racing
            # every write, where a busy one would meet one now and then.
            "polling_interval": 0,
        },
    )


def _write(folder: Path, transport: str) -> None:
    """Another process (the web server, the sweeper) ringing doorbells."""
    with _connection(folder, transport) as conn:
        queue = conn.SimpleQueue("doorbell")
        for number in range(MESSAGES):
            queue.put({"number": number})


def test_the_embedded_default_uses_it(tmp_path):
    env = deployment_environ()
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env["DURABLERUNS_VAR_DIR"] = str(tmp_path / "var")
    code = "from durableruns.celery import app; print(app.connection_for_write().transport_cls)"
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert shown.stdout.strip() == TRANSPORT, shown.stderr


def test_a_reader_racing_another_process_gets_every_message_whole(tmp_path):
    transport = TRANSPORT
    writer = multiprocessing.get_context("spawn").Process(target=_write, args=(tmp_path, transport))
    received: list[int] = []
    with _connection(tmp_path, transport) as conn:
        queue = conn.SimpleQueue("doorbell")
        writer.start()
        while len(received) < MESSAGES:
            message = queue.get(timeout=60)
            received.append(message.payload["number"])
            message.ack()
    writer.join(timeout=30)
    assert sorted(received) == list(range(MESSAGES))
