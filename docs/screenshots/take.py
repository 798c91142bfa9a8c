"""Take the README's screenshots from the real app (demo web + worker, real Chromium).

Serve the demo's data from a scratch database, with crash injection on so that one
refund escalates, then run this script, which starts a few more runs, waits for them
and photographs the operator pages. The crash kills the worker process executing the
refund, so the worker is a prefork one restarted in a loop (`make demo` itself stops
everything when one of its children dies):

    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/durableruns_shots
    export REDIS_URL=redis://127.0.0.1:6379/4 DURABLERUNS_CRASH_DIR=/tmp/shots-crash \\
           DURABLERUNS_LEASE_TTL=3 DURABLERUNS_SWEEP_INTERVAL=1 \\
           DURABLERUNS_PROVIDER_URL=http://127.0.0.1:8011
    python manage.py demo --setup-only
    python manage.py runserver 127.0.0.1:8011 --noreload --insecure &
    while true; do celery -A durableruns worker --pool=prefork --concurrency=3; done &
    python docs/screenshots/take.py http://127.0.0.1:8011
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
OUT = Path(__file__).resolve().parent
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _wait(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def seed() -> None:
    import django

    django.setup()
    from durableruns.engine import crashpoints
    from durableruns.engine.registry import load_agent_modules
    from durableruns.engine.runs import start_run
    from durableruns.models import Run

    load_agent_modules(["durableruns.demo.agents"])
    crash_dir = os.environ["DURABLERUNS_CRASH_DIR"]
    Path(crash_dir).mkdir(parents=True, exist_ok=True)
    crashpoints.arm(crash_dir, "refund-unsafe-A-1001", crashpoints.AFTER_EFFECT_STARTED, 2)
    start_run(
        "refund-bot", {"order_id": "A-1001", "payments": "none"}, run_id="refund-unsafe-A-1001"
    )
    for order in ("A-1001", "A-1003"):
        start_run("refund-bot", {"order_id": order, "payments": "lookup"}, run_id=f"refund-{order}")
    # Fails transiently four times: photographed while it waits for its next attempt.
    start_run(
        "refund-bot",
        {"order_id": "A-1003", "payments": "dedupe", "fail_first": 4},
        run_id="refund-retrying-A-1003",
    )
    for topic in ("durable execution", "idempotency keys", "htmx dashboards"):
        start_run("research-bot", {"topic": topic}, run_id=f"research-{topic.replace(' ', '-')}")
    _wait(
        lambda: Run.objects.filter(pk="refund-unsafe-A-1001", status="escalated").exists(),
        "the unsafe refund to escalate",
    )
    _wait(
        lambda: not Run.objects.filter(status__in=["queued", "running"]).exists(),
        "the runs to settle",
    )


def _retried_run_succeeded() -> bool:
    from durableruns.models import Run

    return Run.objects.filter(pk="refund-retrying-A-1003", status="succeeded").exists()


def shoot(base: str) -> None:
    from playwright.sync_api import sync_playwright

    pages = {
        "run-live.png": "/runs/refund-retrying-A-1003/",
        "runs.png": "/",
        "run.png": "/runs/demo-research/",
        # Taken after the retried refund succeeded: its bar shows each failed attempt.
        "run-timeline.png": "/runs/refund-retrying-A-1003/#steps",
        "effects.png": "/effects/",
        "escalations.png": "/escalations/",
        "replay.png": "/runs/demo-research/replay/",
        "fork.png": "/runs/demo-refund-kettle/fork/?position=2",
        "start.png": "/runs-new/?agent=refund-bot",
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1100, "height": 720})
        page.goto(f"{base}/login/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", "operator-demo-pass")
        page.click("button:has-text('Log in')")
        page.wait_for_url(f"{base}/")
        for name, path in pages.items():
            page.goto(base + path)
            if name == "run-live.png":
                page.locator("#pending-retry").wait_for(timeout=60_000)
            if name == "run-timeline.png":
                _wait(_retried_run_succeeded, "the retried refund to succeed")
                page.reload()
                page.locator("rect.attempt-failed").first.wait_for(state="attached")
                page.locator("h2:has-text('Steps')").evaluate("h => h.scrollIntoView()")
            if name == "fork.png":  # the editable input and output, and the sandbox default
                page.locator("#fork-input").evaluate("e => e.scrollIntoView({block: 'start'})")
            if name == "escalations.png":
                page.locator("h3:has-text('Evidence')").first.evaluate(
                    "h => h.scrollIntoView({block: 'center'})"
                )
            page.screenshot(path=str(OUT / name), full_page=False)
            print("saved", OUT / name)
        browser.close()


if __name__ == "__main__":
    seed()
    shoot(sys.argv[1].rstrip("/"))
