"""A team on the live dashboard (issue 27): VIEWERS people watching run pages, REVIEWERS
working the inbox and OPERATORS browsing, against the documented production web service
(docker-compose.yml's web command: gunicorn, 3 threaded workers x 8 threads,
settings_production, sessions kept 60 s).

Its own database (`<prefix>_team`): 100,000 runs, 10,000 pending and 100,000 decided
approvals, and 20 running 50-step runs that the viewers watch (benchmarks/team_seed.py).
Every person logs in through the login form (their own session, CSRF token and client
address, as a proxy would forward it) and then behaves as the page's htmx does:

- a viewer loads a run page, then polls it every 1 s with the version it shows (204
  when unchanged), never overlapping, honouring X-Poll-Interval;
- a reviewer loads the inbox, polls it every 2 s (version, newest card, shown cards)
  and every 10-30 s decides one of the cards it shows (several may pick the same card:
  the loser is told "nothing changed");
- an operator loads a page (runs, failed runs, a run, effects, escalations, history)
  every 2-4 s.
Meanwhile a writer appends a step to every watched run every 2 s and a new pending
approval every 5 s, so polls see changes. One probe person loads a run page every
second: "one extra user's page load".

Reported for the measuring window: page, poll and decision latency (p50/p95/max),
errors (5xx, refused connections, time-outs; unexpected 4xx apart), how long a new step
takes to reach its viewers, the server's CPU (gunicorn's processes, in cores), this
generator's own CPU, Postgres sessions, the load average, and whether every decision
was recorded exactly once. A floor is measured first in the same run (one person, no
load): the ratios divide loaded p95 by it.

    BENCH_TEAM=200,100,20 BENCH_TEAM_SECONDS=60 python -m benchmarks.team_load [--quick]
    BENCH_TEAM_CODE=/path/to/checkout ...   # serve another checkout's code (before/after)
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .common import REDIS_URL, ROOT, libpq_url, percentile, section_main, setup_django
from .team_seed import watched_run

HOST = "bench.local"
PASSWORD = "bench-password-1"  # noqa: S105 - bench users in a bench database
WATCHED = 20
FIRST_RUN = "team-0000000"  # pending: the writer copies it
TIMEOUT = 30.0
VERSION = re.compile(r'"X-Live-Version": "([0-9a-f]+)"')
STEP = re.compile(r'id="step-(\d+)"')
SHOWN = re.compile(r'<input type="hidden" name="shown" value="(\d+)">')
DECIDED_CARD = re.compile(r'<article[^>]*id="approval-(\d+)"[^>]*hx-swap-oob="true"')
AFTER = re.compile(r'id="inbox-poll"[^>]*hx-get="[^"]*after=(\d+)')
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


# --- A small HTTP/1.1 client: keep-alive, cookies, no parsing beyond what is needed ---


class Http:
    """One person's browser connection (kept alive, reopened when the server closed it)."""

    def __init__(self, port: int, address: str) -> None:
        self.port, self.address = port, address
        self.cookies: dict[str, str] = {}
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", "X-Forwarded-Proto: https"]
        lines += [f"X-Forwarded-For: {self.address}", "Accept-Encoding: identity"]
        if self.cookies:
            lines.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        lines.append(f"Content-Length: {len(body)}")
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
        for attempt in (1, 2):
            fresh = self.writer is None
            if fresh:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            try:
                return await self._exchange(raw)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                self.close()
                # A kept-alive connection the server had closed: it never read the request.
                got = getattr(exc, "partial", b"")
                if fresh or attempt == 2 or got:
                    raise
        raise AssertionError("unreachable")

    async def _exchange(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        assert self.reader and self.writer
        self.writer.write(raw)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        for line in header_lines:
            if not line:
                continue
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
            headers[name] = value
        length = int(headers.get("content-length", "0"))
        body = await self.reader.readexactly(length) if length else b""
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


# --- Figures -----------------------------------------------------------------------


@dataclass
class Figures:
    measuring: bool = False
    times: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    answers: dict[str, int] = field(default_factory=dict)
    seen_after: list[float] = field(default_factory=list)  # a new step, until its viewer saw it
    decided: dict[int, str] = field(default_factory=dict)  # approval -> who was told "done"
    refused: int = 0  # "nothing changed": another reviewer decided it first
    told_to_wait: int = 0
    loaded: int = 0  # people whose first page has arrived (the window opens after all)

    def record(self, kind: str, ms: float, status: int, headers: dict[str, str]) -> None:
        if not self.measuring:
            return
        self.times.setdefault(kind, []).append(ms)
        self.answers[f"{kind} {status}"] = self.answers.get(f"{kind} {status}", 0) + 1
        if "x-poll-interval" in headers:
            self.told_to_wait += 1
        if status >= 500 or status in (403, 429) or (400 <= status < 500 and kind != "decision"):
            self.fail(f"{kind} HTTP {status}")

    def fail(self, what: str) -> None:
        if self.measuring:
            self.errors[what] = self.errors.get(what, 0) + 1


class Person:
    def __init__(self, port: int, number: int, username: str, figures: Figures) -> None:
        self.http = Http(port, f"10.{number // 65536 % 256}.{number // 256 % 256}.{number % 256}")
        self.username, self.figures = username, figures

    async def get(self, kind: str, path: str, headers: dict[str, str] | None = None) -> Any:
        return await self._timed(kind, "GET", path, headers or {}, b"")

    async def post(self, kind: str, path: str, form: dict[str, str], htmx: bool) -> Any:
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": f"https://{HOST}",
            "Referer": f"https://{HOST}{path}",
            "X-CSRFToken": self.http.cookies.get("csrftoken", ""),
        }
        if htmx:
            headers["HX-Request"] = "true"
        return await self._timed(kind, "POST", path, headers, urlencode(form).encode())

    async def _timed(self, kind: str, method: str, path: str, headers: dict, body: bytes) -> Any:
        started = time.perf_counter()
        try:
            status, got, text = await asyncio.wait_for(
                self.http.request(method, path, headers, body), TIMEOUT
            )
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            self.http.close()
            self.figures.fail(f"{kind} {type(exc).__name__}")
            return 0, {}, ""
        ms = (time.perf_counter() - started) * 1000
        self.figures.record(kind, ms, status, got)
        if kind == "page" and self.figures.measuring:  # which pages are slow
            self.figures.times.setdefault(f"page {_page_name(path)}", []).append(ms)
        return status, got, text.decode("utf-8", "replace")

    async def log_in(self) -> None:
        _, _, page = await self.get("login", "/login/")
        token = CSRF_INPUT.search(page).group(1)
        form = {"username": self.username, "password": PASSWORD, "csrfmiddlewaretoken": token}
        status, _, _ = await self.post("login", "/login/", form, htmx=False)
        if status != 302 or "sessionid" not in self.http.cookies:
            raise RuntimeError(f"{self.username} could not log in: HTTP {status}")


def _page_name(path: str) -> str:
    if path.startswith("/runs/"):
        return "run"
    if path.startswith("/approvals/"):
        return "history" if "history" in path else "inbox"
    return {"/": "runs", "/?status=failed": "failed runs"}.get(path, path.strip("/"))


async def _tick(started: float, interval: float, not_before: float) -> None:
    """Sleep until the next tick of an `every` trigger at or after `not_before`."""
    now = time.monotonic()
    wait_until = max(now, not_before)
    ticks = -(-(wait_until - started) // interval)
    await asyncio.sleep(max(0.0, started + ticks * interval - now))


def _next_allowed(headers: dict[str, str], interval: float) -> float:
    """As app.js: the server's X-Poll-Interval, else half the interval after the answer."""
    try:
        told = float(headers.get("x-poll-interval", "0"))
    except ValueError:
        told = 0.0
    return time.monotonic() + (told if told > 0 else interval / 2)


# --- People ------------------------------------------------------------------------


async def viewer(person: Person, run: str, stop: asyncio.Event, steps: dict) -> None:
    _, _, page = await person.get("page", f"/runs/{run}/")
    person.figures.loaded += 1
    version = VERSION.search(page).group(1) if VERSION.search(page) else ""
    newest = max((int(p) for p in STEP.findall(page)), default=-1)
    started, allowed = time.monotonic(), 0.0
    while not stop.is_set():
        await _tick(started, 1.0, allowed)
        headers = {"HX-Request": "true", "X-Live-Version": version}
        status, got, body = await person.get("poll", f"/runs/{run}/", headers)
        allowed = _next_allowed(got, 1.0)
        if status == 200 and VERSION.search(body):
            version = VERSION.search(body).group(1)
            shown = max((int(p) for p in STEP.findall(body)), default=newest)
            if shown > newest and (run, shown) in steps and person.figures.measuring:
                person.figures.seen_after.append((time.time() - steps[(run, shown)]) * 1000)
            newest = max(newest, shown)


async def reviewer(person: Person, stop: asyncio.Event) -> None:
    first = True
    while not stop.is_set():
        _, _, page = await person.get("page", "/approvals/")
        person.figures.loaded += first
        first = False
        match = VERSION.search(page)
        after = AFTER.search(page)
        if not (match and after):
            person.figures.fail("inbox page without its poll")
            await asyncio.sleep(2)
            continue
        version, since = match.group(1), int(after.group(1))
        shown = [int(pk) for pk in SHOWN.findall(page)]
        await _work_the_inbox(person, stop, version, since, shown)


async def _work_the_inbox(
    person: Person, stop: asyncio.Event, version: str, since: int, shown: list[int]
) -> None:
    started, allowed = time.monotonic(), 0.0
    decide_at = started + random.uniform(2, 20)
    while not stop.is_set() and len(shown) >= 5:  # fewer left: the reviewer reloads
        await _tick(started, 2.0, allowed)
        if time.monotonic() >= decide_at:
            pk = random.choice(shown)
            await _decide(person, pk)
            shown.remove(pk)  # the card is swapped for its decided one: no longer shown
            decide_at = time.monotonic() + random.uniform(10, 30)
        query = urlencode([("view", "pending"), ("sort", "oldest"), ("after", since)])
        query += "".join(f"&shown={pk}" for pk in shown)
        headers = {"HX-Request": "true", "X-Live-Version": version}
        status, got, body = await person.get("poll", f"/approvals/?{query}", headers)
        allowed = _next_allowed(got, 2.0)
        if status == 200:
            version = VERSION.search(body).group(1) if VERSION.search(body) else version
            since = int(AFTER.search(body).group(1)) if AFTER.search(body) else since
            gone = {int(pk) for pk in DECIDED_CARD.findall(body)}
            shown = [pk for pk in shown if pk not in gone] + [int(p) for p in SHOWN.findall(body)]


async def _decide(person: Person, pk: int) -> None:
    form = {"decision": "approve", "comment": "", "next": "/approvals/"}
    status, _, body = await person.post("decision", f"/approvals/{pk}/decide/", form, htmx=True)
    if status == 200 and "Approved: " in body:
        if person.figures.measuring:
            person.figures.decided[pk] = person.username
    elif status == 200 and "Nothing changed" in body:
        person.figures.refused += 1
    elif status:
        person.figures.fail(f"decision HTTP {status}")


async def operator(person: Person, stop: asyncio.Event) -> None:
    pages = [
        "/",
        "/?status=failed",
        f"/runs/{watched_run(0)}/",
        "/effects/",
        "/escalations/",
        "/approvals/?view=history",
    ]
    await person.get("page", pages[0])
    person.figures.loaded += 1
    while not stop.is_set():
        await asyncio.sleep(random.uniform(2, 4))
        await person.get("page", random.choice(pages))


async def probe(person: Person, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await person.get("probe", f"/runs/{watched_run(1)}/")
        await asyncio.sleep(1)


# --- The writer: new steps for the watched runs, new approvals for the inbox ---------


def writer(url: str, stop: threading.Event, steps: dict) -> None:
    import psycopg

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        step_columns = _columns(conn, "durableruns_step")
        run_columns = _columns(conn, "durableruns_run")
        approval_columns = _columns(conn, "durableruns_approval")
        tick = 0
        while not stop.wait(1.0):
            tick += 1
            if tick % 5 == 0:
                _new_approval(conn, tick, run_columns, approval_columns)
            if tick % 2:
                continue
            for i in range(WATCHED):
                position = _new_step(conn, watched_run(i), step_columns)
                steps[(watched_run(i), position)] = time.time()


def _columns(conn: Any, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
        "AND column_name <> 'id'",
        [table],
    ).fetchall()
    return [name for (name,) in rows]


def _new_step(conn: Any, run: str, columns: list[str]) -> int:
    override = {
        "position": "s.position + 1",
        "step_id": "(s.position + 1) || '-step'",
        "started_at": "now()",
        "finished_at": "now()",
    }
    values = ", ".join(override.get(c, f"s.{c}") for c in columns)
    (position,) = conn.execute(
        # Names from the catalogue; values are parameters.
        f"INSERT INTO durableruns_step ({', '.join(columns)}) SELECT {values} "  # noqa: S608
        "FROM durableruns_step s WHERE s.run_id = %s ORDER BY s.position DESC LIMIT 1 "
        "RETURNING position",
        [run],
    ).fetchone()
    conn.execute(
        "UPDATE durableruns_run SET steps_used = %s, updated_at = now() WHERE id = %s",
        [position + 1, run],
    )
    return position


def _new_approval(conn: Any, tick: int, run_columns: list[str], columns: list[str]) -> None:
    """A copy of the first pending approval and its run, asked now."""
    run = f"team-new-{tick:06d}"
    now = {"created_at": "now()", "updated_at": "now()"}
    values = ", ".join(now.get(c, c) for c in run_columns)
    conn.execute(
        # Names from the catalogue; values are parameters.
        f"INSERT INTO durableruns_run (id, {', '.join(run_columns)}) "  # noqa: S608
        f"SELECT %s, {values} FROM durableruns_run WHERE id = %s",
        [run, FIRST_RUN],
    )
    picked = ", ".join({"run_id": "%s", "created_at": "now()"}.get(c, c) for c in columns)
    conn.execute(
        f"INSERT INTO durableruns_approval ({', '.join(columns)}) "  # noqa: S608
        f"SELECT {picked} FROM durableruns_approval WHERE run_id = %s",
        [run, FIRST_RUN],
    )


# --- Orchestration -----------------------------------------------------------------


def measure(quick: bool) -> dict[str, Any]:
    people = os.environ.get("BENCH_TEAM", "50,25,5" if quick else "200,100,20")
    viewers, reviewers, operators = (int(n) for n in people.split(","))
    seconds = float(os.environ.get("BENCH_TEAM_SECONDS", 15 if quick else 60))
    code = Path(os.environ.get("BENCH_TEAM_CODE", ROOT)).resolve()
    url = setup_django("_team", fresh=True)
    import psycopg

    from .team_seed import seed

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        # Quick mode: a tenth of the data (the plans are the same index scans).
        scale = 10 if quick else 1
        seed(
            conn,
            runs=100_000 // scale,
            pending=10_000 // scale,
            decided=100_000 // scale,
            watched=WATCHED,
        )
    names = _users(viewers, reviewers, operators)
    with (
        tempfile.TemporaryDirectory(prefix="bench-team-") as tmp,
        _gunicorn(url, code, tmp) as (
            port,
            master,
        ),
    ):
        result = asyncio.run(_load(port, master, url, names, seconds))
    from django.db import connection

    connection.close()
    result.update(
        people={"viewers": viewers, "reviewers": reviewers, "operators": operators},
        seconds=seconds,
        code=str(code),
    )
    result["decisions"] = _check_decisions(result.pop("decided"), result["refused"])
    return result


def _users(viewers: int, reviewers: int, operators: int) -> dict[str, list[str]]:
    """Bench users with one cheap hash (benchmarks/bench_hasher.py), in their roles."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.contrib.auth.models import Group

    from durableruns import roles

    from .bench_hasher import BenchPasswordHasher

    roles.ensure_groups()
    names = {
        "viewer": [f"viewer-{i}" for i in range(viewers + 1)],  # + the probe
        "reviewer": [f"reviewer-{i}" for i in range(reviewers)],
        "operator": [f"operator-{i}" for i in range(operators)],
    }
    password = make_password(PASSWORD, hasher=BenchPasswordHasher())
    model = get_user_model()
    groups = {"viewer": roles.OPERATOR, "reviewer": roles.REVIEWER, "operator": roles.OPERATOR}
    for role, group in groups.items():
        users = model.objects.bulk_create(
            [model(username=name, password=password) for name in names[role]]
        )
        Group.objects.get(name=group).user_set.add(*users)
    return names


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _gunicorn:
    """The documented web service (docker-compose.yml's command) over `code`."""

    def __init__(self, url: str, code: Path, tmp: str) -> None:
        from cryptography.fernet import Fernet

        self.port = _free_port()
        self.log = Path(tmp) / "gunicorn.log"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings_bench",
            "PYTHONPATH": f"{code}{os.pathsep}{ROOT}",
            "SECRET_KEY": secrets.token_urlsafe(64),
            "DURABLERUNS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
            "ALLOWED_HOSTS": HOST,
            "DURABLERUNS_TRUSTED_PROXIES": "1",
            "DATABASE_URL": url,
            "REDIS_URL": REDIS_URL,
            "DURABLERUNS_QUEUE": f"bench-team-{secrets.token_hex(4)}",
            "STATIC_ROOT": str(Path(tmp) / "static"),
            "LOG_LEVEL": "WARNING",
        }
        self.code = code

    def __enter__(self) -> tuple[int, int]:
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
            cwd=self.code,
            env=self.env,
            check=True,
        )
        command = [sys.executable, "-m", *_web_command(self.code, f"127.0.0.1:{self.port}")]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=self.code, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {self.log.read_text()[-2000:]}")
            with socket.socket() as sock:
                if (
                    sock.connect_ex(("127.0.0.1", self.port)) == 0
                    and len(_workers(self.proc.pid)) == 3
                ):
                    return self.port, self.proc.pid
            time.sleep(0.2)
        raise RuntimeError("gunicorn did not start in 90 s")

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        _forget(self.env["DURABLERUNS_QUEUE"])


def _web_command(code: Path, bind: str) -> list[str]:
    """The web service's command from `code`'s docker-compose.yml (so a before/after
    run serves each checkout as it documents itself), bound to `bind`."""
    import yaml

    compose = yaml.safe_load((code / "docker-compose.yml").read_text())
    command = list(compose["services"]["web"]["command"])
    command[command.index("--bind") + 1] = bind
    return command


def _forget(queue: str) -> None:
    """The decisions' doorbells went to a queue nobody serves: delete it."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"*{queue}*"):
        client.delete(key)


def _workers(master: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == master:
                found.append(int(entry.name))
    return found


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _sessions(url: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
            [url.rsplit("/", 1)[1]],
        )
        return cursor.fetchone()[0]


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values),
    }


async def _floor(port: int, figures: Figures, name: str) -> dict[str, Any]:
    """One person, no load: the run page, its unchanged poll, the inbox and its poll."""
    person = Person(port, 65000, name, figures)
    await person.log_in()
    figures.measuring = True
    run = f"/runs/{watched_run(2)}/"
    for _ in range(20):
        _, _, page = await person.get("floor page", run)
        version = VERSION.search(page).group(1)
        await person.get("floor poll", run, {"HX-Request": "true", "X-Live-Version": version})
        await person.get("floor inbox", "/approvals/")
    floor = {kind: _summary(figures.times.pop(kind)) for kind in list(figures.times)}
    figures.answers.clear()
    figures.measuring = False
    person.http.close()
    return floor


async def _load(
    port: int, master: int, url: str, names: dict[str, list[str]], seconds: float
) -> dict[str, Any]:
    figures = Figures()
    floor = await _floor(port, figures, names["viewer"][-1])
    people = {
        role: [Person(port, n + 1000 * k, name, figures) for n, name in enumerate(names[role])]
        for k, role in enumerate(names)
    }
    everyone = [p for group in people.values() for p in group]
    logins = asyncio.Semaphore(8)

    async def log_in(person: Person) -> None:
        async with logins:
            await person.log_in()

    await asyncio.gather(*(log_in(p) for p in everyone))
    steps: dict[tuple[str, int], float] = {}
    stop, stop_writer = asyncio.Event(), threading.Event()
    thread = threading.Thread(target=writer, args=(url, stop_writer, steps), daemon=True)
    thread.start()
    *watchers, probing = people["viewer"]
    tasks = [
        *(viewer(p, watched_run(i % WATCHED), stop, steps) for i, p in enumerate(watchers)),
        *(reviewer(p, stop) for p in people["reviewer"]),
        *(operator(p, stop) for p in people["operator"]),
        probe(probing, stop),
    ]
    running = [asyncio.ensure_future(_staggered(task, random.uniform(0, 2))) for task in tasks]
    # The window opens once everyone has a page (the start-up burst of page loads is not
    # what is measured) and has polled for a few seconds.
    deadline = time.monotonic() + 120
    while figures.loaded < len(tasks) - 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(5)
    pids = [master, *_workers(master)]
    load_before = os.getloadavg()
    cpu_server, cpu_self, began = _cpu_seconds(pids), _self_cpu(), time.monotonic()
    figures.measuring = True
    sessions = []
    for _ in range(int(seconds)):
        await asyncio.sleep(1)
        sessions.append(await asyncio.to_thread(_sessions, url))
    figures.measuring = False
    window = time.monotonic() - began
    cpu_server = (_cpu_seconds(pids) - cpu_server) / window
    cpu_self = (_self_cpu() - cpu_self) / window
    load_after = os.getloadavg()
    stop.set()
    stop_writer.set()
    await asyncio.wait(running, timeout=TIMEOUT + 5)
    for p in everyone:
        p.http.close()
    thread.join(timeout=10)
    return _figures(figures, floor, window, cpu_server, cpu_self, load_before, load_after, sessions)


async def _staggered(task: Any, delay: float) -> None:
    await asyncio.sleep(delay)
    await task


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _figures(
    figures: Figures,
    floor: dict[str, Any],
    window: float,
    cpu_server: float,
    cpu_self: float,
    load_before: tuple[float, ...],
    load_after: tuple[float, ...],
    sessions: list[int],
) -> dict[str, Any]:
    latency = {kind: _summary(values) for kind, values in figures.times.items()}
    ratios = {
        "page p95 / floor page p50": _ratio(latency.get("page"), floor["floor page"]),
        "probe p95 / floor page p50": _ratio(latency.get("probe"), floor["floor page"]),
        "poll p95 / floor poll p50": _ratio(latency.get("poll"), floor["floor poll"]),
    }
    requests = sum(len(v) for v in figures.times.values())
    return {
        "latency_ms": latency,
        "floor_ms": floor,
        "ratios": ratios,
        "errors": figures.errors,
        "error_count": sum(figures.errors.values()),
        "answers": figures.answers,
        "requests_per_s": requests / window,
        "new_step_seen_after_ms": _summary(figures.seen_after),
        "told_to_wait": figures.told_to_wait,
        "server_cpu_cores": cpu_server,
        "generator_cpu_cores": cpu_self,
        "postgres_sessions_max": max(sessions, default=0),
        "load_average": {"before": load_before, "after": load_after},
        "decided": figures.decided,
        "refused": figures.refused,
    }


def _ratio(loaded: dict[str, float] | None, floor: dict[str, float]) -> float | None:
    if not loaded or not loaded.get("n") or not floor.get("p50"):
        return None
    return loaded["p95"] / floor["p50"]


def _check_decisions(decided: dict[int, str], refused: int) -> dict[str, Any]:
    """Every decision a reviewer was told of is stored once, by that reviewer, and
    audited once; "nothing changed" answers changed nothing."""
    from django.db.models import Count

    from durableruns.models import Approval, AuditEvent

    stored = dict(
        Approval.objects.filter(pk__in=list(decided)).values_list("pk", "decided_by__username")
    )
    audits = dict(
        AuditEvent.objects.filter(
            action="approval.approve",
            target_type="approval",
            target_id__in=[str(pk) for pk in decided],
        )
        .values("target_id")
        .annotate(n=Count("pk"))
        .values_list("target_id", "n")
    )
    wrong = [pk for pk, who in decided.items() if stored.get(pk) != who or audits.get(str(pk)) != 1]
    return {"told_done": len(decided), "told_nothing_changed": refused, "not_once": len(wrong)}


if __name__ == "__main__":
    section_main(measure)
