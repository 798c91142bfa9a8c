"""An XSS corpus in model output, tool arguments, approval payloads and error messages,
rendered in real Chromium, executes nothing: it shows as text, creates no element, and
would be blocked by the Content-Security-Policy anyway. htmx keeps working under it."""

from __future__ import annotations

import pytest
from django.utils import timezone

from durableruns.models import Effect, RedactionRule, RetentionPolicy, Run, Step
from tests.e2e.admin_browser import page  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CORPUS = [
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=1">',
    '"><svg onload=window.__xss=1>',
    "</pre><script>alert(1)</script>",
    '<iframe srcdoc="<script>parent.__xss=1</script>"></iframe>',
    '<a href="javascript:window.__xss=1" id=xss-link>click</a>',
    "'-alert(1)-'",
    "<details open ontoggle=window.__xss=1>",
    "<style>body{display:none}</style>",
]
INJECTED = (
    "img[src='x'], svg:not(.bar):not(.axis), iframe, #xss-link, details[ontoggle], main style"
)


def _hostile_run(index: int, payload: str) -> Run:
    now = timezone.now()
    run = Run.objects.create(
        id=f"xss-{index}",
        agent="refund-bot",
        agent_version="1",
        input={"order_id": payload},
        status=Run.Status.FAILED,
        error={"type": "PermanentError", "message": payload},
        max_steps=10,
        max_duration_seconds=60,
        finished_at=now,
    )
    steps = [
        (
            "llm",
            "plan",
            {"messages": [{"role": "user", "content": payload}]},
            {"content": payload},
            None,
        ),
        ("tool", "refund", {"order_id": payload}, {"refund_id": payload}, None),
        # An approval's payload as the reviewer saw it.
        (
            "approval",
            "approve-refund",
            {"summary": payload, "payload": {"note": payload}},
            {"approved": True, "comment": payload},
            None,
        ),
        (
            "tool",
            "send_email",
            {"body": payload},
            None,
            {"type": "PermanentError", "message": payload},
        ),
    ]
    for position, (kind, name, step_input, result, error) in enumerate(steps):
        Step.objects.create(
            run=run,
            position=position,
            step_id=f"{position}-{name}",
            kind=kind,
            name=name,
            tool=name if kind == "tool" else "",
            input=step_input,
            result=result,
            error=error,
            started_at=now,
            finished_at=now,
        )
    Effect.objects.create(
        run=run,
        position=1,
        idempotency_key=f"{run.id}:1-refund:refund:ab",
        tool="refund",
        tool_kind="unsafe_write",
        fingerprint="ab",
        args={"order_id": payload},
        state="succeeded",
        started_at=now,
    )
    return run


def _assert_inert(tab, where: str) -> None:
    tab.locator("main").first.wait_for()
    assert tab.evaluate("() => window.__xss") is None, where
    assert tab.dialogs == [], where
    assert tab.locator(INJECTED).count() == 0, where


def test_the_corpus_renders_as_text_and_executes_nothing(page, live_server):  # noqa: F811
    runs = [_hostile_run(index, payload) for index, payload in enumerate(CORPUS)]
    RetentionPolicy.objects.create(
        name=CORPUS[1][:100], statuses=["failed"], age_days=30, action="delete"
    )
    RedactionRule.objects.create(kind="key", value=CORPUS[0], note=CORPUS[2])

    for run, payload in zip(runs, CORPUS, strict=True):
        page.goto(f"{live_server.url}/runs/{run.id}/")
        for details in page.locator("details").all():
            details.evaluate("(el) => { el.open = true; }")
        _assert_inert(page, run.id)
        # Escaped, the payload is visible as the text it is.
        assert page.get_by_text(payload, exact=False).count() > 0, payload
    for path in ("/", "/manage/policies/", "/manage/redaction/"):
        page.goto(live_server.url + path)
        _assert_inert(page, path)
    assert page.get_by_text(CORPUS[2]).count() > 0


def test_htmx_refreshes_a_live_run_under_the_content_security_policy(page, live_server):  # noqa: F811
    run = Run.objects.create(
        id="live",
        agent="refund-bot",
        agent_version="1",
        input={},
        status=Run.Status.RUNNING,
        max_steps=10,
        max_duration_seconds=60,
    )
    response = page.goto(f"{live_server.url}/runs/{run.id}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    from playwright.sync_api import expect

    expect(page.locator("#run-live")).to_contain_text("Running")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    expect(page.locator("#run-live")).to_contain_text("Succeeded", timeout=15_000)
    # No CSP report on the way: the console watcher (conftest.py) fails the test on one.
