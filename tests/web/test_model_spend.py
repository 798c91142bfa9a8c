"""Tokens and dollars where people and scripts read them: the run page (with what replays
and forks saved), the runs list (sortable by cost), the API, the export and /metrics."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import tests.agents_toolcalling  # noqa: F401 - registers support-bot
from durableruns.engine.runs import start_run
from durableruns.models import Run, Step
from durableruns.services import exports
from durableruns.services import runs as run_actions
from tests.web.dashboard import make_run, make_step, rung_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = {"question": "Where is my refund?"}


@pytest.fixture
def model_url(provider_url, settings):
    settings.DURABLERUNS_MODEL_URL = f"{provider_url}/providers/v1"


class _SlowClock:
    """Each reading one second later: with a 1.5 s task limit a pass executes one step."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def resumed(model_url, rung, settings, monkeypatch) -> Run:
    """A support-bot run executed one step per executor pass, as after many resumes."""
    from durableruns.engine import context, executor

    settings.DURABLERUNS_MAX_TASK_SECONDS = 1.5
    monkeypatch.setattr(context, "time", _SlowClock())
    run, _ = start_run("support-bot", QUESTION, run_id="resumed")
    for _ in range(20):
        if Run.objects.get(pk=run.id).status != Run.Status.QUEUED:
            break
        executor.advance(run.id)
    run = Run.objects.get(pk=run.id)
    assert run.status == Run.Status.SUCCEEDED, run.error
    return run


def _usage(run: Run) -> list[tuple[dict, int]]:
    steps = Step.objects.filter(run=run, kind=Step.Kind.LLM).order_by("position")
    return [(step.result["usage"], step.lease_number) for step in steps]


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_run_page_shows_tokens_cost_and_what_replays_saved(client, alice, resumed):
    client.force_login(alice)
    page = _text(client.get(reverse("run", args=[resumed.id])).content.decode())
    assert f"{resumed.tokens_in} in ({resumed.tokens_cached} cached) · 14 out" in page
    assert resumed.leases_taken == 5  # one step per pass
    assert "budget 50000" in page and "of a $0.1 budget" in page
    saved = sum(
        (u["prompt_tokens"] + u["completion_tokens"]) * (resumed.leases_taken - lease)
        for u, lease in _usage(resumed)
    )
    assert saved > 0
    assert f"Saved {saved} tokens" in page
    # turn-0 was replayed by the passes after it; turn-1 ran in the last pass.
    assert "1 model call replayed from history by later executor passes" in page


def test_a_fork_shows_the_model_calls_it_reused_and_spends_only_its_own(client, bob, resumed, rung):
    from durableruns.engine import executor

    child = run_actions.fork(resumed, 4, user=bob)  # reuses turn-0 and its tool calls
    while Run.objects.get(pk=child.id).status == Run.Status.QUEUED:
        executor.advance(child.id)
    child.refresh_from_db()
    assert child.status == Run.Status.SUCCEEDED, child.error
    (_, copied_lease), (own, _) = _usage(child)
    assert copied_lease == 0
    assert child.tokens_in == own["prompt_tokens"]  # turn-0 was spent by the parent
    assert child.cost == Decimal(own["cost"])
    client.force_login(bob)
    page = _text(client.get(reverse("run", args=[child.id])).content.decode())
    assert "1 reused from the forked run instead of calling the model again" in page


def test_the_runs_list_shows_tokens_and_cost_and_sorts_by_cost(client, alice):
    make_run("cheap", tokens_in=10, tokens_out=2, cost=Decimal("0.0001"))
    make_run("dear", tokens_in=9000, tokens_out=800, cost=Decimal("1.25"))
    make_run("unpriced", tokens_in=50, tokens_out=5)
    make_run("no-model")
    client.force_login(alice)
    page = client.get(reverse("runs")).content.decode()
    assert "9000 / 800" in page and "$1.25" in page and "$0.0001" in page
    assert "not priced" in page
    assert 'id="sort-cost"' in page
    by_cost = client.get(reverse("runs"), {"sort": "cost"}).content.decode()
    order = re.findall(r'id="row-([^"]+)"', by_cost)
    assert order[:2] == ["dear", "cheap"]


def test_sorting_by_cost_pages_with_a_cursor(client, alice, settings, monkeypatch):
    from durableruns.web import views

    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    for index in range(5):
        make_run(f"r{index}", cost=Decimal(index) / 100)
    client.force_login(alice)
    first = client.get(reverse("runs"), {"sort": "cost"}).content.decode()
    assert re.findall(r'id="row-([^"]+)"', first) == ["r4", "r3"]
    link = re.search(r'href="\?([^"]*cursor=[^"]*)" rel="next"', first).group(1)
    second = client.get(f"{reverse('runs')}?{link.replace('&amp;', '&')}").content.decode()
    assert re.findall(r'id="row-([^"]+)"', second) == ["r2", "r1"]
    bad = client.get(reverse("runs"), {"sort": "cost", "cursor": "bm90LWEtY29zdHxy"})
    assert bad.status_code == 400


def test_the_api_gives_tokens_and_cost(bob):
    make_run("api-run", tokens_in=120, tokens_out=30, tokens_cached=100, cost=Decimal("0.00004"))
    client = Client()
    client.force_login(bob)
    body = client.get("/api/runs/api-run/").json()
    assert (body["tokens_in"], body["tokens_out"], body["tokens_cached"]) == (120, 30, 100)
    assert Decimal(body["cost"]) == Decimal("0.00004")
    assert body["max_tokens"] is None and body["max_cost"] is None


def test_the_export_carries_cost_as_a_decimal_and_an_import_keeps_it(tmp_path):
    run = make_run("exported", tokens_in=5, tokens_out=1, cost=Decimal("0.0000012345"))
    Run.objects.filter(pk=run.pk).update(max_tokens=100, max_cost=Decimal("0.5"))
    out = StringIO()
    call_command("exportrun", "exported", stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["run"]["cost"] == "0.0000012345" and doc["run"]["max_cost"] == "0.5000000000"
    Run.objects.all().delete()
    exports.import_run(doc)
    imported = Run.objects.get(pk="exported")
    assert (imported.cost, imported.max_tokens, imported.max_cost) == (
        Decimal("0.0000012345"),
        100,
        Decimal("0.5"),
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cost", "-1", "'cost' must be a non-negative amount of dollars"),
        ("cost", "NaN", "'cost' must be a non-negative amount of dollars"),
        ("max_cost", "1e99", "'max_cost' is over 100,000,000 dollars"),
        ("cost", True, "'cost' must be a non-negative amount of dollars"),
        ("tokens_in", -5, "'tokens_in' must be a whole number of tokens"),
        ("max_tokens", 2**40, "'max_tokens' must be a whole number of tokens"),
    ],
)
def test_an_import_refuses_a_bad_token_or_cost_field(field, value, message):
    make_run("bad-import")
    out = StringIO()
    call_command("exportrun", "bad-import", stdout=out)
    doc = json.loads(out.getvalue())
    doc["run"][field] = value
    Run.objects.all().delete()
    with pytest.raises(exports.ExportError, match=re.escape(message)):
        exports.import_run(doc)
    assert not Run.objects.exists()


def test_metrics_report_tokens_and_cost_per_agent(client, settings):
    settings.DURABLERUNS_METRICS_TOKEN = "metrics-token"
    make_run("m1", agent="support-bot", tokens_in=100, tokens_out=10, cost=Decimal("0.25"))
    make_run("m2", agent="support-bot", tokens_in=50, tokens_out=5, cost=Decimal("0.5"))
    text = client.get(reverse("metrics"), headers={"Authorization": "Bearer metrics-token"})
    body = text.content.decode()
    assert 'durableruns_model_tokens_total{agent="support-bot",type="prompt"} 150.0' in body
    assert 'durableruns_model_tokens_total{agent="support-bot",type="completion"} 15.0' in body
    assert 'durableruns_model_cost_dollars_total{agent="support-bot"} 0.75' in body
