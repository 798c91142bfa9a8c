"""`make demo`: migrate, create one user per role and a few runs, then serve web + worker.

No beat: the worker's sweeper thread sweeps (services/sweeper.py). Restarting over an
existing var/ is fine, whatever retention did to the demo runs since; if any child
fails to start or dies, the demo stops the others and exits non-zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableruns import roles
from durableruns.engine.runs import RunConflict, start_run

DEMO_USERS = {
    roles.REVIEWER: "reviewer-demo-pass",
    roles.OPERATOR: "operator-demo-pass",
    roles.ADMIN: "admin-demo-pass",
}
DEMO_RUNS = [
    ("refund-bot", {"order_id": "A-1001"}, "demo-refund-kettle"),
    ("refund-bot", {"order_id": "A-1003", "payments": "lookup"}, "demo-refund-mug"),
    ("research-bot", {"topic": "durable agents"}, "demo-research"),
    # 250.00 is above the approval threshold: waits in the reviewers' inbox.
    ("refund-bot", {"order_id": "A-1002"}, "demo-refund-bike"),
]


class Command(BaseCommand):
    help = "Run the whole product locally: web and worker, with demo users and runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--setup-only",
            action="store_true",
            help="migrate and create the demo data, start nothing",
        )

    def handle(self, *args: object, **options: object) -> None:
        port = int(options["port"])
        _prepare_broker_folders()
        call_command("migrate", interactive=False, verbosity=0)
        self._create_users()
        if options["setup_only"]:
            self._create_runs()
            return
        self._create_runs()
        children = self._start(port)
        self.stdout.write(
            self.style.SUCCESS(f"\ndurableruns is running at http://127.0.0.1:{port}/")
        )
        for role, password in DEMO_USERS.items():
            self.stdout.write(f"  log in as {role:<9} password {password}")
        self.stdout.write("Press Ctrl-C to stop.\n")
        failed = _wait(children)
        if failed:
            raise CommandError(f"{failed} exited; the demo stopped everything it started")

    def _create_users(self) -> None:
        users = get_user_model()
        for role, password in DEMO_USERS.items():
            user, created = users.objects.get_or_create(
                username=role, defaults={"email": f"{role}@example.com"}
            )
            if created:
                user.set_password(password)
                user.save()
            roles.grant(user, role)

    def _create_runs(self) -> None:
        for agent, run_input, run_id in DEMO_RUNS:
            try:
                start_run(agent, run_input, run_id=run_id)
            except RunConflict:
                # Retention redacted this demo run's input since the last start: it is
                # still the demo's run, so keep it rather than fail the restart.
                self.stdout.write(f"keeping demo run {run_id} (changed since it was created)")

    def _start(self, port: int) -> list[subprocess.Popen]:
        env = {**os.environ, "DURABLERUNS_PROVIDER_URL": f"http://127.0.0.1:{port}"}
        # Links in reviewers' emails point at this demo unless configured otherwise.
        env.setdefault("DURABLERUNS_BASE_URL", f"http://127.0.0.1:{port}")
        manage = [sys.executable, str(Path(settings.BASE_DIR, "manage.py"))]
        celery = [sys.executable, "-m", "celery", "-A", "durableruns"]
        commands = [
            [*manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
            [*celery, "worker", "--pool=prefork", "--concurrency=2", "--loglevel=INFO"],
        ]
        children: list[subprocess.Popen] = []
        try:
            for command in commands:
                children.append(subprocess.Popen(command, env=env))
        except BaseException:
            _stop(children)
            raise
        return children


def _prepare_broker_folders() -> None:
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if key in options:
            Path(options[key]).mkdir(parents=True, exist_ok=True)
    Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait(children: list[subprocess.Popen]) -> str:
    """Until Ctrl-C, SIGTERM or a child's exit; then stop every child. Returns what
    exited on its own ("" after Ctrl-C or SIGTERM)."""
    # `kill` (SIGTERM) stops the demo like Ctrl-C does, children included.
    signal.signal(signal.SIGTERM, _interrupt)
    failed = ""
    try:
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        dead = next(child for child in children if child.poll() is not None)
        failed = f"{' '.join(map(str, dead.args[1:3]))} (exit code {dead.returncode})"
    except KeyboardInterrupt:
        pass
    finally:
        _stop(children)
    return failed


def _stop(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
