"""The effect ledger page: every effect, filters, exact key search, keyset pages, roles."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from durableruns.models import Effect
from durableruns.web import keyset, ledger
from tests.web.dashboard import make_effect, make_run

pytestmark = pytest.mark.django_db
URL = reverse("effects")


def _keys(response) -> list[str]:
    body = response.content.decode()
    table = re.search(r'<table class="effects">.*?</table>', body, re.S).group(0)
    return re.findall(r"<td class=\"key\"><code>([^<]+)</code></td>", table)


@pytest.fixture
def ledger_rows() -> dict[str, Effect]:
    run = make_run("ledger-run")
    return {
        "refund": make_effect(
            run, 2, tool="refund", state="succeeded", result={"refund_id": "rf_1"}
        ),
        "email": make_effect(
            run, 3, tool="send_email", state="failed", error={"message": "mailbox full"}
        ),
        "unsafe": make_effect(
            run, 4, tool="refund_unsafe", tool_kind="unsafe_write", state="unknown"
        ),
    }


def test_it_redirects_anonymous_users_to_log_in(client):
    assert client.get(URL).status_code == 302


def test_it_refuses_a_user_without_a_role(client, dave):
    client.force_login(dave)
    assert client.get(URL).status_code == 403


@pytest.mark.parametrize("actor", ["alice", "bob", "carol"])
def test_it_shows_every_effect_to_every_role(client, request, actor, ledger_rows):
    client.force_login(request.getfixturevalue(actor))
    response = client.get(URL)
    assert response.status_code == 200
    assert len(_keys(response)) == 3


def test_it_shows_key_tool_kind_state_attempts_result_run_and_step(client, alice, ledger_rows):
    client.force_login(alice)
    body = client.get(URL).content.decode()
    refund = ledger_rows["refund"]
    key = re.escape(refund.idempotency_key)
    row = re.search(
        rf"<tr>\s*<td>[^<]*</td>\s*<td class=\"key\"><code>{key}.*?</tr>", body, re.S
    ).group(0)
    assert "<td>refund</td>" in row and "<td>idempotent_write</td>" in row
    assert "Succeeded" in row and "<td>1</td>" in row
    assert "&quot;refund_id&quot;: &quot;rf_1&quot;" in row
    assert f'href="{reverse("run", args=["ledger-run"])}#step-2"' in row
    assert "mailbox full" in body


AGAIN = "called again, as the first call had not happened"


@pytest.mark.parametrize(
    ("state", "resolution", "reads"),
    [
        ("succeeded", "", "Succeeded"),
        ("resolved", "happened", "Resolved: it had happened"),
        ("resolved", "not_happened", "Resolved: it had not happened, to be called again"),
        ("resolved", "aborted", "Resolved: the run was aborted"),
        # Resolved `not_happened`, the call was made again (same key): its own outcome.
        ("started", "not_happened", f"Started: {AGAIN}"),
        ("succeeded", "not_happened", f"Succeeded: {AGAIN}"),
        ("failed", "not_happened", f"Failed: {AGAIN}"),
        ("unknown", "not_happened", f"Unknown: {AGAIN}"),
        # Aborted, then the run was resumed: the engine asks again (engine/context.py).
        ("unknown", "aborted", "Unknown: the run was aborted, then resumed, before anyone said"),
    ],
)
def test_an_effects_state_reads_as_one_phrase(client, alice, state, resolution, reads):
    run = make_run("phrased")
    make_effect(run, 1, state=state, resolution=resolution)
    client.force_login(alice)
    for url in (URL, reverse("run", args=[run.id])):
        body = client.get(url).content.decode()
        label = re.search(r'<span class="state state-[a-z]+">([^<]*)</span>([^<]*)<', body)
        assert label.group(1).startswith(reads), url
        assert "(" not in label.group(2), url  # no outcome added after the state


def test_it_filters_by_state(client, alice, ledger_rows):
    client.force_login(alice)
    assert _keys(client.get(URL, {"state": "unknown"})) == [ledger_rows["unsafe"].idempotency_key]


def test_it_filters_by_tool(client, alice, ledger_rows):
    client.force_login(alice)
    keys = _keys(client.get(URL, {"tool": "send_email"}))
    assert keys == [ledger_rows["email"].idempotency_key]


def test_it_filters_by_kind(client, alice, ledger_rows):
    client.force_login(alice)
    keys = _keys(client.get(URL, {"kind": "unsafe_write"}))
    assert keys == [ledger_rows["unsafe"].idempotency_key]


def test_it_answers_whether_a_key_was_already_used(client, alice, ledger_rows):
    client.force_login(alice)
    key = ledger_rows["refund"].idempotency_key
    found = client.get(URL, {"key": key})
    assert _keys(found) == [key]
    assert "Yes: the ledger has this key (succeeded)." in found.content.decode()
    missing = client.get(URL, {"key": key[:-1]})  # exact, not a prefix search
    assert _keys(missing) == []
    assert "No effect with this key was ever started." in missing.content.decode()


def test_it_pages_by_keyset_and_stays_stable_under_inserts(client, alice, monkeypatch):
    monkeypatch.setattr(ledger, "PAGE_SIZE", 2)
    run = make_run("paged")
    made = [make_effect(run, position) for position in range(5)]
    client.force_login(alice)
    first = client.get(URL)
    make_effect(run, 10)  # a new effect arrives between page loads
    second = client.get(URL, {"cursor": first.context["next_cursor"]})
    third = client.get(URL, {"cursor": second.context["next_cursor"]})
    newest_first = [e.idempotency_key for e in reversed(made)]
    assert _keys(first) + _keys(second) + _keys(third) == newest_first
    assert third.context["next_cursor"] is None


def test_its_next_page_link_keeps_the_filters(client, alice, monkeypatch):
    monkeypatch.setattr(ledger, "PAGE_SIZE", 1)
    run = make_run("paged")
    make_effect(run, 0, state="failed")
    make_effect(run, 1, state="failed")
    client.force_login(alice)
    body = client.get(URL, {"state": "failed"}).content.decode()
    assert re.search(r'href="\?state=failed&amp;cursor=[^"]+" rel="next"', body)


def test_its_paging_links_encode_the_key_searched(client, alice):
    run = make_run("odd")
    effect = make_effect(run, 0, key="odd:0-x:x:a&b c")
    client.force_login(alice)
    cursor = keyset.effect_cursor(Effect(id=effect.id + 1))
    body = client.get(URL, {"key": effect.idempotency_key, "cursor": cursor}).content.decode()
    assert 'href="?key=odd%3A0-x%3Ax%3Aa%26b+c">First page</a>' in body


@pytest.mark.parametrize("rows", [5, 50])
def test_it_uses_a_constant_number_of_queries(client, alice, django_assert_num_queries, rows):
    run = make_run("many")
    for position in range(rows):
        make_effect(run, position)
    client.force_login(alice)
    # session, user, permissions (own and the roles', one query), the nav's pending approvals
    # (alice reviews), effects page
    with django_assert_num_queries(5):
        response = client.get(URL)
    assert len(_keys(response)) == rows
