"""`make demo`: migrate, create one user per role and a few runs, then serve web + worker.

The terminal shows the URL and logins last; the children log to var/*.log (--logs: here).

No beat: the worker's sweeper thread sweeps (services/sweeper.py). Restarting over an
existing var/ is fine, whatever retention did to the demo runs since; if any child
fails to start or dies, the demo stops the others and exits non-zero."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
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
    # One model reply with three tool calls, executed concurrently.
    ("triage-bot", {"question": "Where is my refund for A-1001?"}, "demo-triage"),
    # 250.00 is above the approval threshold: waits in the reviewers' inbox.
    ("refund-bot", {"order_id": "A-1002"}, "demo-refund-bike"),
    # A question for a reviewer to answer in words ("Send answer" in the inbox).
    ("replacement-bot", {"order_id": "A-1001"}, "demo-replacement"),
    # The provider refunds but its answer is lost: escalated to an operator at once.
    (
        "refund-bot",
        {"order_id": "A-1003", "payments": "none", "lose_answer": True},
        "demo-refund-lost-answer",
    ),
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
        parser.add_argument(
            "--logs",
            action="store_true",
            help="show the web server's and the worker's logs here "
            "(default: var/web.log and var/worker.log)",
        )

    def handle(self, *args: object, **options: object) -> None:
        port = int(options["port"])
        var = Path(settings.VAR_DIR)
        var.mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        self._create_users()
        self._create_runs()
        if options["setup_only"]:
            return
        _check_port_free(port)
        logs = None if options["logs"] else var
        # `kill` (SIGTERM) stops the demo like Ctrl-C does, children included.
        signal.signal(signal.SIGTERM, _interrupt)
        children = self._start(port, logs)
        try:
            failed = _wait_until_serving(port, children)
            if not failed:
                self._announce(port, logs)
                failed = _wait(children)
        except KeyboardInterrupt:
            failed = ""
        finally:
            _stop(children)
        if failed:
            where = f" (see {logs}/web.log and worker.log)" if logs else ""
            raise CommandError(f"{failed}{where}; the demo stopped everything it started")

    def _announce(self, port: int, logs: Path | None) -> None:
        """The URL and logins, last on screen (nothing else writes here unless --logs)
        and in var/demo.txt for when they have scrolled away anyway."""
        lines = [
            f"durableruns is running at http://127.0.0.1:{port}/",
            *(
                f"  log in as {role:<9} password {password}"
                for role, password in DEMO_USERS.items()
            ),
        ]
        if logs:
            lines.append(f"Logs: {logs}/web.log and worker.log (--logs shows them here)")
        lines.append(f"Reviewers' e-mails: {Path(settings.VAR_DIR, 'mail')}/")
        Path(settings.VAR_DIR, "demo.txt").write_text("\n".join(lines) + "\n")
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(lines[0]))
        for line in lines[1:]:
            self.stdout.write(line)
        self.stdout.write("Press Ctrl-C to stop.")
        self.stdout.flush()

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

    def _start(self, port: int, logs: Path | None) -> list[subprocess.Popen]:
        env = {**os.environ, "DURABLERUNS_PROVIDER_URL": f"http://127.0.0.1:{port}"}
        if settings.DATABASES["default"]["ENGINE"].endswith("postgresql") and not env.get(
            "DURABLERUNS_CONN_MAX_AGE"
        ):
            env.setdefault("DURABLERUNS_DB_POOL_SIZE", "8")
        # Links in reviewers' emails point at this demo unless configured otherwise.
        env.setdefault("DURABLERUNS_BASE_URL", f"http://127.0.0.1:{port}")
        # Reviewers' e-mails go to files, not into the worker's log as Celery warnings.
        if "EMAIL_BACKEND" not in env:
            env["EMAIL_BACKEND"] = "django.core.mail.backends.filebased.EmailBackend"
            env["EMAIL_FILE_PATH"] = str(Path(settings.VAR_DIR, "mail"))
        manage = [sys.executable, str(Path(settings.BASE_DIR, "manage.py"))]
        celery = [sys.executable, "-m", "celery", "-A", "durableruns"]
        commands = {
            "web": [*manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"],
            # Threads, as in production (README, "Sizing workers"): a run waiting on the
            # model costs a thread. On Postgres its threads share a pool of sessions.
            "worker": [*celery, "worker", "--pool=threads", "--concurrency=32", "--loglevel=INFO"],
        }
        children: list[subprocess.Popen] = []
        try:
            for name, command in commands.items():
                children.append(_spawn(command, env, logs / f"{name}.log" if logs else None))
        except BaseException:
            _stop(children)
            raise
        return children


def _spawn(command: list[str], env: dict[str, str], log: Path | None) -> subprocess.Popen:
    if log is None:
        return subprocess.Popen(command, env=env)
    with log.open("ab") as sink:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)


def _check_port_free(port: int) -> None:
    with socket.socket() as probe:
        # As the server will: connections of a demo just stopped (TIME_WAIT) do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise CommandError(
                f"port {port} is in use: stop what uses it, or pick another "
                f"(make demo PORT={port + 1})"
            ) from None


def _wait_until_serving(port: int, children: list[subprocess.Popen]) -> str:
    """Empty once the web server answers; else what went wrong first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            return _wait(children)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return ""
        except OSError:
            time.sleep(0.3)
    return "the web server did not answer in 120 s"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait(children: list[subprocess.Popen]) -> str:
    """Until a child exits (returns which) or Ctrl-C or SIGTERM (KeyboardInterrupt)."""
    while all(child.poll() is None for child in children):
        time.sleep(0.5)
    dead = next(child for child in children if child.poll() is not None)
    return f"{' '.join(map(str, dead.args[1:3]))} exited (exit code {dead.returncode})"


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
