"""Child runs on the dashboard and the API: the run page links parent and children (and
its poll notices a child's change), the runs list and the API filter by parent (a bad
value is a 400 with a message), the inbox card of a child's approval shows its parent,
and cancelling a parent from the page or the API cancels its children."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from durableruns.engine import doorbell, executor
from durableruns.engine.runs import start_run
from durableruns.models import Run
from tests import agents_children  # noqa: F401 - registers the agents
from tests.api.conftest import client_for
from tests.web.dashboard import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def rung(monkeypatch) -> list[str]:
    rings: list[str] = []
    monkeypatch.setattr(doorbell, "_publish", lambda run_id, countdown: rings.append(run_id))
    return rings


@pytest.fixture
def family(db) -> Run:
    """A parent waiting for its child, which awaits a reviewer's approval."""
    run, _ = start_run("boss-asks", {"item": "kayak"}, run_id="fam")
    assert executor.advance(run.id) == Run.Status.AWAITING_CHILD
    assert executor.advance("fam.c0") == Run.Status.AWAITING_APPROVAL
    return Run.objects.get(pk=run.id)


def test_the_run_page_links_parent_and_children(alice, client, family):
    client.force_login(alice)
    parent_page = client.get(reverse("run", args=["fam"])).content.decode()
    assert 'id="run-children"' in parent_page
    assert 'href="/runs/fam.c0/"' in parent_page
    assert "kid-asks@1" in parent_page and "Awaiting Approval" in parent_page
    # The child's waits are not the parent's budget.
    assert "waiting for approval, child runs or a durable sleep)" in parent_page
    child_page = client.get(reverse("run", args=["fam.c0"])).content.decode()
    assert re.search(r'id="run-parent"><a href="/runs/fam/">', child_page)
    assert "boss-asks" in child_page


def test_the_parents_live_poll_renders_again_when_a_child_changes(alice, client, family):
    client.force_login(alice)
    page = client.get(reverse("run", args=["fam"])).content.decode()
    version = re.search(r'"X-Live-Version": "([0-9a-f]+)"', page).group(1)
    headers = {"HX-Request": "true", "X-Live-Version": version}
    assert client.get(reverse("run", args=["fam"]), headers=headers).status_code == 204
    Run.objects.filter(pk="fam.c0").update(status=Run.Status.RUNNING)
    again = client.get(reverse("run", args=["fam"]), headers=headers)
    assert again.status_code == 200 and "Running" in again.content.decode()


def test_the_runs_list_filters_by_parent(alice, client, family):
    make_run("unrelated")
    client.force_login(alice)
    page = client.get(reverse("runs"), {"parent": "fam"}).content.decode()
    assert 'href="/runs/fam.c0/"' in page
    assert 'href="/runs/unrelated/"' not in page and '<code class="full-id">fam</code>' not in page
    listed = client.get(reverse("runs")).content.decode()
    assert 'child of <a href="/runs/fam/">fam</a>' in listed


MUST_BE_AN_ID = "the parent filter must be a run id"


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("no spaces allowed", MUST_BE_AN_ID),
        ("x" * 65, MUST_BE_AN_ID),
        ("../fam", MUST_BE_AN_ID),
        ("a\x00b", "parent contains a NUL character"),
    ],
)
def test_a_bad_parent_filter_is_a_400_with_a_message(alice, client, bad, said):
    client.force_login(alice)
    response = client.get(reverse("runs"), {"parent": bad})
    assert response.status_code == 400
    assert said in response.content.decode()


def test_the_api_filters_runs_by_parent_and_refuses_a_bad_one(alice, family):
    api = client_for(alice)
    found = api.get("/api/runs/", {"parent": "fam"})
    assert found.status_code == 200
    rows = found.json()["results"]
    assert [(r["id"], r["parent_run"], r["parent_position"]) for r in rows] == [
        ("fam.c0", "fam", 0)
    ]
    assert api.get("/api/runs/", {"parent": "nobody"}).json()["results"] == []
    refused = api.get("/api/runs/", {"parent": "not a run id"})
    assert refused.status_code == 400
    assert "parent" in refused.json()


def test_a_childs_approval_shows_its_parent_in_the_inbox(alice, client, family):
    client.force_login(alice)
    page = client.get(reverse("approvals")).content.decode()
    card = page[page.index('class="child-of"') :][:400]
    assert "Asked by a child run: step 0 of" in card
    assert '<a href="/runs/fam/">boss-asks run fam</a>' in card


def test_cancelling_a_parent_in_the_page_cancels_its_children(bob, client, family):
    client.force_login(bob)
    response = client.post(reverse("run-cancel", args=["fam"]), {"reason": "wrong order"})
    assert response.status_code in (200, 302)
    statuses = dict(Run.objects.filter(pk__startswith="fam").values_list("id", "status"))
    assert statuses == {"fam": "cancelled", "fam.c0": "cancelled"}


def test_cancelling_a_parent_through_the_api_cancels_its_children(bob, family):
    response = client_for(bob).post(
        "/api/runs/fam/cancel/", {"reason": "wrong order"}, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert Run.objects.get(pk="fam.c0").status == Run.Status.CANCELLED
