"""Saved views on the runs page (issue 24): a person keeps the filters they use under a
name, as a link to the runs page with its query string; only their own, every role."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import reverse

from durableruns.models import SavedView
from durableruns.web import saved_views
from tests.web.dashboard import make_run

pytestmark = pytest.mark.django_db
RUNS = reverse("runs")
SAVE = reverse("run-views-save")
HTMX = {"HTTP_HX_REQUEST": "true"}


def _delete_url(view: SavedView) -> str:
    return reverse("run-view-delete", args=[view.pk])


def _shown(response) -> list[str]:
    return re.findall(r'data-run="([^"]+)"', response.content.decode())


def _links(response) -> dict[str, str]:
    """The saved views listed on a page: name -> href."""
    section = re.search(r'<section id="saved-views".*?</section>', response.content.decode(), re.S)
    assert section, "no #saved-views section"
    found = re.findall(r'<a href="([^"]*)"[^>]*data-saved-view>([^<]*)</a>', section.group(0))
    return {name: href.replace("&amp;", "&") for href, name in found}


def _post_raw(client: Client, url: str, fields: dict[str, str]):
    """A form as a hostile client sends it: lone surrogates as their bytes."""
    body = "&".join(
        f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
        for k, v in fields.items()
    )
    return client.post(url, body, content_type="application/x-www-form-urlencoded")


def test_an_operator_saves_the_current_filters_under_a_name(client, bob):
    client.force_login(bob)
    response = client.post(SAVE, {"name": "failed refunds", "query": "status=failed&agent=x"})
    assert response.status_code == 302
    assert response["Location"] == f"{RUNS}?status=failed&agent=x"
    view = SavedView.objects.get()
    assert (view.owner, view.name, view.query) == (bob, "failed refunds", "status=failed&agent=x")


def test_the_query_is_stored_normalised_with_unknown_params_dropped(client, bob):
    client.force_login(bob)
    query = "foo=1&agent=refund-bot&cursor=abc&status=nope&q=&sort=cost&x=%3Cb%3E"
    response = client.post(SAVE, {"name": "v", "query": query})
    assert response.status_code == 302
    # Known parameters only, in the runs page's order; a status that is none is no filter.
    assert SavedView.objects.get().query == "agent=refund-bot&sort=cost"
    assert response["Location"] == f"{RUNS}?agent=refund-bot&sort=cost"


def test_the_runs_page_lists_my_views_as_links(client, bob):
    SavedView.objects.create(owner=bob, name="failed", query="status=failed")
    SavedView.objects.create(owner=bob, name="all runs", query="")
    client.force_login(bob)
    assert _links(client.get(RUNS)) == {"all runs": RUNS, "failed": f"{RUNS}?status=failed"}


def test_a_saved_view_opens_the_same_filtered_list(client, bob):
    make_run("ok-run", status="succeeded")
    make_run("bad-run", status="failed", agent="refund-bot")
    make_run("other-bad", status="failed", agent="research-bot")
    client.force_login(bob)
    client.post(SAVE, {"name": "failed refunds", "query": "status=failed&agent=refund-bot"})
    href = _links(client.get(RUNS))["failed refunds"]
    opened = client.get(href)
    assert _shown(opened) == ["bad-run"]
    assert 'aria-current="true" data-saved-view>failed refunds<' in opened.content.decode()


def test_saving_an_existing_name_replaces_its_filters(client, bob):
    SavedView.objects.create(owner=bob, name="mine", query="status=failed")
    client.force_login(bob)
    response = client.post(SAVE, {"name": " mine ", "query": "status=running"}, follow=True)
    assert list(SavedView.objects.values_list("name", "query")) == [("mine", "status=running")]
    assert "Replaced the saved view" in response.content.decode()


@pytest.mark.parametrize("actor", ["alice", "bob", "carol"])
def test_every_role_keeps_its_own_views(client, request, actor):
    user = request.getfixturevalue(actor)
    client.force_login(user)
    assert client.post(SAVE, {"name": "mine", "query": "status=failed"}).status_code == 302
    assert _links(client.get(RUNS)) == {"mine": f"{RUNS}?status=failed"}
    view = SavedView.objects.get(owner=user)
    assert client.post(_delete_url(view)).status_code == 302
    assert not SavedView.objects.exists()


def test_the_same_name_is_anyones_to_use(client, alice, bob):
    SavedView.objects.create(owner=alice, name="mine", query="status=failed")
    client.force_login(bob)
    assert client.post(SAVE, {"name": "mine", "query": "status=running"}).status_code == 302
    assert sorted(SavedView.objects.values_list("owner__username", "query")) == [
        ("alice", "status=failed"),
        ("bob", "status=running"),
    ]


def test_nobody_sees_another_persons_views(client, alice, bob):
    SavedView.objects.create(owner=alice, name="alice's secret view", query="status=failed")
    client.force_login(bob)
    response = client.get(RUNS)
    assert _links(response) == {}
    assert "alice&#x27;s secret view" not in response.content.decode()


def test_a_user_without_a_role_cannot_save(client, dave):
    client.force_login(dave)
    assert client.post(SAVE, {"name": "mine", "query": ""}).status_code == 403
    assert not SavedView.objects.exists()


def test_anonymous_users_are_sent_to_log_in(client, bob):
    view = SavedView.objects.create(owner=bob, name="mine", query="")
    for url in (SAVE, _delete_url(view)):
        response = client.post(url, {"name": "other", "query": ""})
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert list(SavedView.objects.values_list("name", flat=True)) == ["mine"]


def test_deleting_my_view_goes_back_to_the_page_i_was_on(client, bob):
    view = SavedView.objects.create(owner=bob, name="mine", query="status=failed")
    client.force_login(bob)
    response = client.post(_delete_url(view), {"query": "agent=refund-bot&cursor=x"})
    assert response.status_code == 302
    assert response["Location"] == f"{RUNS}?agent=refund-bot"
    assert not SavedView.objects.exists()


def test_deleting_another_persons_view_is_a_404_and_keeps_it(client, alice, bob, carol):
    view = SavedView.objects.create(owner=alice, name="alice's", query="status=failed")
    for someone in (bob, carol):  # an admin is no exception: a view is personal
        client.force_login(someone)
        assert client.post(_delete_url(view)).status_code == 404
    assert SavedView.objects.filter(pk=view.pk).exists()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "needs a name"),
        ("   ", "needs a name"),
        ("x" * 81, "at most 80 characters"),
        ("tab\tname", "control character"),
        ("nul\x00name", "NUL"),  # refused by the validation layer, before the view
        ("lone\ud800surrogate", "lone surrogate"),  # also the validation layer's
    ],
)
def test_a_hostile_name_is_refused_with_a_plain_4xx(client, bob, name, says):
    client.force_login(bob)
    response = _post_raw(client, SAVE, {"name": name, "query": "status=failed"})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not SavedView.objects.exists()


def test_a_name_of_80_characters_is_kept(client, bob):
    client.force_login(bob)
    assert client.post(SAVE, {"name": "é" * 80, "query": ""}).status_code == 302
    assert SavedView.objects.get().name == "é" * 80


def test_names_are_escaped_on_output(client, bob):
    client.force_login(bob)
    client.post(SAVE, {"name": "<script>alert(1)</script>", "query": "status=failed"})
    body = client.get(RUNS).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("input=%7Bnot+json", "not valid JSON"),
        ("since=yesterday", "unreadable date in: since"),
        ("parent=..%2F..", "must be a run id"),
        ("error=" + "x" * 256, "longer than 255"),
        ("status=failed&" + "x" * 5000, "longer than 4096 characters"),
        ("a&" * 1500, "too many parameters"),
    ],
)
def test_filters_the_runs_page_would_refuse_are_not_saved(client, bob, query, says):
    client.force_login(bob)
    response = client.post(SAVE, {"name": "bad", "query": query})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not SavedView.objects.exists()


def test_a_page_whose_filters_are_refused_lists_the_views_but_offers_no_save(client, bob):
    SavedView.objects.create(owner=bob, name="failed", query="status=failed")
    client.force_login(bob)
    for query in ({"input": "{not json"}, {"since": "yesterday"}):
        response = client.get(RUNS, query)
        assert _links(response) == {"failed": f"{RUNS}?status=failed"}
        assert "Save these filters as" not in response.content.decode()


def test_a_100_kb_query_is_a_4xx_and_writes_nothing(client, bob):
    client.force_login(bob)
    response = client.post(SAVE, {"name": "huge", "query": "q=" + "a" * 100 * 1024})
    assert response.status_code == 400
    assert not SavedView.objects.exists()


def test_a_refused_replacement_leaves_the_saved_view_as_it_was(client, bob):
    SavedView.objects.create(owner=bob, name="mine", query="status=failed")
    client.force_login(bob)
    response = client.post(SAVE, {"name": "mine", "query": "input=%5B1%5D"})
    assert response.status_code == 400
    assert list(SavedView.objects.values_list("name", "query")) == [("mine", "status=failed")]


def test_a_person_keeps_a_bounded_number_of_views(client, bob, monkeypatch):
    monkeypatch.setattr(saved_views, "MAX_VIEWS", 2)
    client.force_login(bob)
    for name in ("one", "two"):
        assert client.post(SAVE, {"name": name, "query": ""}).status_code == 302
    refused = client.post(SAVE, {"name": "three", "query": ""})
    assert refused.status_code == 400
    assert "delete one first" in refused.content.decode()
    # Replacing one is still fine: the count does not grow.
    assert client.post(SAVE, {"name": "two", "query": "status=failed"}).status_code == 302
    assert sorted(SavedView.objects.values_list("name", flat=True)) == ["one", "two"]


def test_csrf_is_enforced_on_save_and_delete(bob):
    view = SavedView.objects.create(owner=bob, name="mine", query="")
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    assert client.post(SAVE, {"name": "other", "query": ""}).status_code == 403
    assert client.post(_delete_url(view)).status_code == 403
    assert list(SavedView.objects.values_list("name", flat=True)) == ["mine"]


def test_the_save_form_carries_the_current_filters_and_a_csrf_token(client, bob):
    client.force_login(bob)
    body = client.get(RUNS, {"status": "failed", "cursor": "", "sort": "cost"}).content.decode()
    section = re.search(r'<section id="saved-views".*?</section>', body, re.S).group(0)
    assert 'name="query" value="status=failed&amp;sort=cost"' in section
    assert section.count('method="post"') == section.count('name="csrfmiddlewaretoken"') == 1


def test_htmx_saves_and_deletes_in_place(client, bob):
    client.force_login(bob)
    saved = client.post(SAVE, {"name": "in place", "query": "status=failed"}, **HTMX)
    assert saved.status_code == 200
    assert _links(saved) == {"in place": f"{RUNS}?status=failed"}
    assert 'name="query" value="status=failed"' in saved.content.decode()
    deleted = client.post(_delete_url(SavedView.objects.get()), {"query": "status=failed"}, **HTMX)
    assert deleted.status_code == 200
    assert _links(deleted) == {}


def test_htmx_gets_a_refusal_in_place_with_its_real_status(client, bob):
    client.force_login(bob)
    response = client.post(SAVE, {"name": "", "query": "status=failed"}, **HTMX)
    assert response.status_code == 400
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="saved-views"')
    assert "needs a name" in body
