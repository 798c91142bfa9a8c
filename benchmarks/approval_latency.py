"""How long from a reviewer's Approve to the run's next step starting, with real workers.

    DATABASE_URL=postgres://... REDIS_URL=redis://... \
        python benchmarks/approval_latency.py --approvals 50 --workers 2

For each approval: start a run of `bench-approval`, wait until it is
`awaiting_approval` (no worker holds it), POST Approve to the real decide view
(Django's test client, in this process), then wait for the next step's row.
Two figures per approval, from the worker's Step.started_at of the next step:
- click: from just before the POST was sent;
- commit: from just after the POST returned (the decision had committed).
No beat runs: every wake-up comes from the decision's doorbell. A benchmark,
not a test: run it on purpose, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
AGENT_MODULE = "benchmarks.approval_agent"


def _setup(queue: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")
    os.environ["DURABLERUNS_QUEUE"] = queue
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    __import__(AGENT_MODULE)


def _start_workers(count: int, queue: str, log_dir: Path) -> list[subprocess.Popen]:
    modules = f"durableruns.demo.agents,{AGENT_MODULE}"
    env = {
        **os.environ,
        "DURABLERUNS_QUEUE": queue,
        "DURABLERUNS_AGENT_MODULES": modules,
        "PYTHONUNBUFFERED": "1",
    }
    workers = []
    for index in range(count):
        log = open(log_dir / f"worker-{index}.log", "wb")  # noqa: SIM115 - lives with the worker
        workers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "durableruns",
                    "worker",
                    "--pool=solo",
                    "--loglevel=WARNING",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-Q",
                    queue,
                    "-n",
                    f"bench-{index}-{uuid.uuid4().hex[:6]}@%h",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return workers


def _poll(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.002)
    raise TimeoutError("the benchmark run did not get there in time")


def _reviewer():
    from django.contrib.auth import get_user_model

    from durableruns import roles

    user, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
    roles.grant(user, roles.REVIEWER)
    return user


def _one(client, prefix: str, n: int) -> tuple[float, float]:
    from django.urls import reverse

    from durableruns.engine.runs import start_run
    from durableruns.models import Approval, Step

    run, _ = start_run("bench-approval", {"n": n}, run_id=f"{prefix}-{n}")
    approval = _poll(
        lambda: Approval.objects.filter(run_id=run.id, run__status="awaiting_approval").first()
    )
    clicked = datetime.now().astimezone()
    response = client.post(reverse("decide_approval", args=[approval.pk]), {"decision": "approve"})
    committed = datetime.now().astimezone()
    if response.status_code != 302:
        raise RuntimeError(f"decide answered {response.status_code}")
    started = _poll(
        lambda: (
            Step.objects.filter(run_id=run.id, position=1)
            .values_list("started_at", flat=True)
            .first()
        )
    )
    return (
        (started - clicked).total_seconds() * 1000,
        (started - committed).total_seconds() * 1000,
    )


def _report(label: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    print(
        f"{label:<28} median {statistics.median(ordered):7.1f} ms   p95 {p95:7.1f} ms   "
        f"min {ordered[0]:6.1f}   max {ordered[-1]:6.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--approvals", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    _setup(queue)
    from django.test import Client

    log_dir = Path(tempfile.gettempdir()) / f"approval-bench-{queue}"
    log_dir.mkdir(parents=True)
    workers = _start_workers(args.workers, queue, log_dir)
    try:
        client = Client()
        client.force_login(_reviewer())
        prefix = f"bench-{uuid.uuid4().hex[:6]}"
        for n in range(args.warmup):
            _one(client, f"{prefix}-warm", n)
        samples = [_one(client, prefix, n) for n in range(args.approvals)]
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=20)
    print(f"{args.approvals} approvals, {args.workers} solo worker(s), no beat; logs in {log_dir}")
    _report("click -> next step started", [click for click, _ in samples])
    _report("commit -> next step started", [commit for _, commit in samples])


if __name__ == "__main__":
    main()
