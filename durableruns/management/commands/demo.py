"""`make demo`: migrate, create one user per role and a few runs, then serve web + worker + beat."""

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
from django.core.management.base import BaseCommand, CommandParser

from durableruns import roles
from durableruns.engine.runs import start_run

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
    help = "Run the whole product locally: web, worker and beat, with demo users and runs."

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
        children = self._start(port)
        self._create_runs()
        self.stdout.write(
            self.style.SUCCESS(f"\ndurableruns is running at http://127.0.0.1:{port}/")
        )
        for role, password in DEMO_USERS.items():
            self.stdout.write(f"  log in as {role:<9} password {password}")
        self.stdout.write("Press Ctrl-C to stop.\n")
        _wait(children)

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
            start_run(agent, run_input, run_id=run_id)

    def _start(self, port: int) -> list[subprocess.Popen]:
        env = {**os.environ, "DURABLERUNS_PROVIDER_URL": f"http://127.0.0.1:{port}"}
        # Links in reviewers' emails point at this demo unless configured otherwise.
        env.setdefault("DURABLERUNS_BASE_URL", f"http://127.0.0.1:{port}")
        manage = [sys.executable, str(Path(settings.BASE_DIR, "manage.py"))]
        celery = [sys.executable, "-m", "celery", "-A", "durableruns"]
        return [
            subprocess.Popen(
                [*manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"], env=env
            ),
            subprocess.Popen(
                [
                    *celery,
                    "worker",
                    "--beat",
                    "--pool=prefork",
                    "--concurrency=2",
                    "--loglevel=INFO",
                    "-s",
                    str(Path(settings.VAR_DIR, "beat")),
                ],
                env=env,
            ),
        ]


def _prepare_broker_folders() -> None:
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if key in options:
            Path(options[key]).mkdir(parents=True, exist_ok=True)
    Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait(children: list[subprocess.Popen]) -> None:
    # `kill` (SIGTERM) stops the demo like Ctrl-C does, children included.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
