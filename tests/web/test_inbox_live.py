"""The inbox's live poll at team scale (issue 27): an unchanged poll is 204 with no body
and no template; a changed one sends only the new cards and the shown cards that left
the queue (decided elsewhere), with the pending count; the queries behind the page and
the poll are index scans at 10,000 pending approvals."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, ContextList
from django.urls import reverse

from durableruns.services import approvals as service
from tests.web.test_approvals import _pending, rung  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _poll_of(body: str) -> tuple[str, dict[str, str]]:
    """The poll element's URL and headers, as htmx would send them (shown = the pending
    cards on the page)."""
    poll = re.search(r'<div id="inbox-poll"[^>]*>', body).group(0)
    url = re.search(r'hx-get="([^"]+)"', poll).group(1).replace("&amp;", "&")
    version = re.search(r'"X-Live-Version": "([0-9a-f]+)"', poll).group(1)
    shown = re.findall(r'<input type="hidden" name="shown" value="(\d+)"', body)
    url += "".join(f"&shown={pk}" for pk in shown)
    return url, {"HX-Request": "true", "X-Live-Version": version}


def test_an_unchanged_poll_is_204_with_no_body_and_no_template(alice):
    _pending("r-1")
    client = _client(alice)
    url, headers = _poll_of(client.get(reverse("approvals")).content.decode())
    response = client.get(url, headers=headers)
    assert response.status_code == 204
    assert response.content == b""
    assert not response.templates and not isinstance(response.context, ContextList)


def test_a_new_approval_is_sent_alone(alice):
    old = _pending("r-old")
    client = _client(alice)
    url, headers = _poll_of(client.get(reverse("approvals")).content.decode())
    new = _pending("r-new")
    body = client.get(url, headers=headers).content.decode()
    assert f'id="approval-{new.pk}"' in body and f'id="approval-{old.pk}"' not in body


@pytest.mark.usefixtures("rung")
def test_a_card_decided_elsewhere_is_sent_decided_and_the_others_are_not(alice, carol):
    kept, gone = _pending("r-kept"), _pending("r-gone")
    client = _client(alice)
    url, headers = _poll_of(client.get(reverse("approvals")).content.decode())
    service.decide(gone, "approve", user=carol, comment="")
    body = client.get(url, headers=headers).content.decode()
    card = re.search(rf'<article[^>]*id="approval-{gone.pk}"[^>]*>', body).group(0)
    assert 'hx-swap-oob="true"' in card and "approval-approved" in card
    assert "Approved by <strong>carol</strong>" in body
    assert f'id="approval-{kept.pk}"' not in body
    assert '<span id="inbox-count" hx-swap-oob="true">1</span>' in body


@pytest.mark.usefixtures("rung")
def test_a_decision_off_the_page_updates_the_count(alice, carol):
    _pending("r-a")
    other = _pending("r-b")
    client = _client(alice)
    body = client.get(reverse("approvals")).content.decode()
    url, headers = _poll_of(body)
    url = re.sub(rf"&shown={other.pk}\b", "", url)  # as if it were on another page
    service.decide(other, "reject", user=carol, comment="no")
    response = client.get(url, headers=headers)
    assert response.status_code == 200
    assert '<span id="inbox-count" hx-swap-oob="true">1</span>' in response.content.decode()


def test_a_hostile_shown_list_is_a_400_or_ignored(alice):
    _pending("r-1")
    client = _client(alice)
    url, headers = _poll_of(client.get(reverse("approvals")).content.decode())
    response = client.get(url + "&shown=1%20OR%201=1", headers=headers)
    assert response.status_code == 400
    assert b"shown" in response.content


def _seed(pending: int, decided: int) -> None:
    """Copies of one pending approval (and its run), set-based, then ANALYZE, so the
    planner sees a team's inbox: `pending` still waiting, `decided` approved."""
    template = _pending("seed-template")
    total = pending + decided - 1
    waiting = f"i < {pending}"
    _copy(
        "durableruns_run",
        template.run_id,
        {
            "id": "'seed-' || i",
            "status": f"CASE WHEN {waiting} THEN 'awaiting_approval' ELSE 'succeeded' END",
        },
        total,
    )
    _copy(
        "durableruns_approval",
        template.pk,
        {
            "run_id": "'seed-' || i",
            "state": f"CASE WHEN {waiting} THEN 'pending' ELSE 'approved' END",
            "decided_at": f"CASE WHEN {waiting} THEN NULL ELSE now() END",
        },
        total,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durableruns_run")
        cursor.execute("ANALYZE durableruns_approval")


def _copy(table: str, pk: object, override: dict[str, str], last: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND column_name <> 'id' OR table_name = %s AND column_name = 'id' "
            "AND %s = 'durableruns_run'",
            [table, table, table],
        )
        columns = [name for (name,) in cursor.fetchall()]
        values = ", ".join(override.get(name, name) for name in columns)
        # Names come from the catalogue and this test; values are parameters.
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {values} "  # noqa: S608
            f"FROM {table}, generate_series(0, %s) AS i WHERE id = %s",
            [last, pk],
        )


def _plans(queries) -> list[tuple[str, str]]:
    found = []
    with connection.cursor() as cursor:
        for query in queries:
            sql = query["sql"]
            if "durableruns_approval" not in sql or not sql.lstrip().startswith("SELECT"):
                continue
            cursor.execute("EXPLAIN " + sql)
            found.append((sql, "\n".join(row[0] for row in cursor.fetchall())))
    return found


@pytest.mark.parametrize("page", ["pending", "poll"])
def test_the_inbox_queries_read_indexes_at_10000_pending(alice, page):
    _seed(pending=10_000, decided=20_000)
    client = _client(alice)
    url, headers = reverse("approvals"), {}
    if page == "poll":
        url, headers = _poll_of(client.get(url).content.decode())
        headers = {**headers, "X-Live-Version": "changed"}
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, headers=headers).status_code == 200
    plans = _plans(queries.captured_queries)
    assert plans
    for sql, plan in plans:
        for table in ("durableruns_approval", "durableruns_run"):
            assert f"Seq Scan on {table}" not in plan, f"{sql}\n{plan}"


def test_a_changed_poll_reads_the_inbox_version_once_and_the_next_poll_is_204(alice):
    """The answer's own version comes from the same three probes as the poll's (read
    before the new cards, as a page's version is), not from three more."""
    _pending("r-old")
    client = _client(alice)
    url, headers = _poll_of(client.get(reverse("approvals")).content.decode())
    new = _pending("r-new")
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(url, headers=headers)
    assert f'id="approval-{new.pk}"' in answer.content.decode()
    newest_probes = [
        q for q in queries.captured_queries if 'MAX("durableruns_approval"."id")' in q["sql"]
    ]
    assert len(newest_probes) == 1, newest_probes

    next_version = re.search(r'"X-Live-Version": "([0-9a-f]+)"', answer.content.decode()).group(1)
    shown = f"{url}&shown={new.pk}".replace(f"after={_after(url)}", f"after={new.pk}")
    again = client.get(shown, headers={**headers, "X-Live-Version": next_version})
    assert again.status_code == 204


def _after(url: str) -> str:
    return re.search(r"after=(\d+)", url).group(1)


def test_the_unfiltered_inbox_counts_its_pending_approvals_once(alice):
    for n in range(3):
        _pending(f"r-{n}")
    client = _client(alice)
    with CaptureQueriesContext(connection) as queries:
        body = client.get(reverse("approvals")).content.decode()
    counts = [
        q
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT COUNT(*) AS "__count" FROM "durableruns_approval"')
    ]
    assert len(counts) == 1, counts
    assert '<span id="inbox-count"' in body and ">3</span>" in body
    # A filtered list counts what it shows, and the nav still counts every pending one.
    filtered = client.get(reverse("approvals") + "?q=nothing-matches").content.decode()
    assert ">3</span>" in filtered


def _pending_counts(queries) -> list[dict]:
    return [
        q
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT COUNT(*) AS "__count" FROM "durableruns_approval"')
    ]


def test_changed_polls_at_one_inbox_version_count_the_pending_approvals_once(alice, carol):
    """A hundred reviewers' changed polls after one change: the first counts, the others
    at the same inbox version reuse its count; the next change counts again."""
    _pending("r-old")
    reviewers = [_client(alice), _client(carol)]
    polls = [_poll_of(c.get(reverse("approvals")).content.decode()) for c in reviewers]
    _pending("r-new")
    with CaptureQueriesContext(connection) as queries:
        answers = [c.get(url, headers=h) for c, (url, h) in zip(reviewers, polls, strict=True)]
    assert [a.status_code for a in answers] == [200, 200]
    assert len(_pending_counts(queries)) == 1
    assert all(">2</span>" in a.content.decode() for a in answers)

    _pending("r-newer")
    with CaptureQueriesContext(connection) as queries:
        answer = reviewers[0].get(*polls[0][:1], headers=polls[0][1])
    assert len(_pending_counts(queries)) == 1
    assert ">3</span>" in answer.content.decode()
