"""Every dashboard page and action, for every actor: anonymous users are sent to log in,
a user without a role gets 403, reviewers may look but not act, operators and admins
may do both. State is checked too: a refused action changes nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from durableruns.models import Effect, Run
from tests.web.agents import ledger_bot  # noqa: F401 - registers t-ledger
from tests.web.dashboard import make_effect, make_run, make_step, rung_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

PAGES = [
    ("runs", []),
    ("run", ["r-done"]),
    ("run-step", ["r-done", 0]),
    ("effects", []),
    ("escalations", []),
]
OPERATOR_PAGES = [("run-replay", ["r-done"]), ("run-fork", ["r-done"])]
ACTIONS = [
    ("run-cancel", ["r-busy"], {"reason": "roles test"}),
    ("run-resume", ["r-failed"], {}),
    ("runs-bulk", [], {"do": "cancel:selected", "run": ["r-busy"], "reason": "roles test"}),
    ("run-fork", ["r-done"], {"position": 0, "reason": "roles test"}),
    ("escalation-resolve", ["EFFECT"], {"resolution": "not_happened"}),
]


@pytest.fixture
def world(rung) -> Effect:
    done = make_run("r-done", agent="t-ledger", status=Run.Status.SUCCEEDED)
    make_step(done, 0, kind="compute", name="prepare", result="prepared")
    make_run("r-busy", status=Run.Status.RUNNING)
    make_run("r-failed", status=Run.Status.FAILED)
    stuck = make_run("r-stuck", status=Run.Status.ESCALATED)
    return make_effect(stuck, 1, state=Effect.State.UNKNOWN)


def _url(name: str, args: list, effect: Effect) -> str:
    return reverse(name, args=[effect.pk if a == "EFFECT" else a for a in args])


def _unchanged() -> bool:
    statuses = dict(Run.objects.values_list("id", "status"))
    return (
        statuses
        == {
            "r-done": "succeeded",
            "r-busy": "running",
            "r-failed": "failed",
            "r-stuck": "escalated",
        }
        and Effect.objects.get(run_id="r-stuck").state == Effect.State.UNKNOWN
    )


@pytest.mark.parametrize(("name", "args"), PAGES + OPERATOR_PAGES)
def test_anonymous_users_are_sent_to_log_in(client, world, name, args):
    response = client.get(_url(name, args, world), {"position": 0})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize(("name", "args", "data"), ACTIONS)
def test_anonymous_users_cannot_act(client, world, name, args, data):
    assert client.post(_url(name, args, world), data).status_code == 302
    assert _unchanged()


@pytest.mark.parametrize(("name", "args"), PAGES + OPERATOR_PAGES)
def test_a_user_without_a_role_sees_nothing(client, dave, world, name, args):
    client.force_login(dave)
    assert client.get(_url(name, args, world), {"position": 0}).status_code == 403


@pytest.mark.parametrize(("name", "args", "data"), ACTIONS)
def test_a_user_without_a_role_cannot_act(client, dave, world, name, args, data):
    client.force_login(dave)
    assert client.post(_url(name, args, world), data).status_code == 403
    assert _unchanged()


@pytest.mark.parametrize(("name", "args"), PAGES)
@pytest.mark.parametrize("actor", ["alice", "bob", "carol"])
def test_every_role_sees_the_pages(client, request, world, actor, name, args):
    client.force_login(request.getfixturevalue(actor))
    assert client.get(_url(name, args, world)).status_code == 200


@pytest.mark.parametrize(("name", "args"), OPERATOR_PAGES)
def test_a_reviewer_cannot_open_operator_pages(client, alice, world, name, args):
    client.force_login(alice)
    assert client.get(_url(name, args, world), {"position": 0}).status_code == 403


@pytest.mark.parametrize(("name", "args", "data"), ACTIONS)
def test_a_reviewer_cannot_act(client, alice, world, name, args, data):
    client.force_login(alice)
    assert client.post(_url(name, args, world), data).status_code == 403
    assert _unchanged()


@pytest.mark.parametrize(("name", "args"), OPERATOR_PAGES)
@pytest.mark.parametrize("actor", ["bob", "carol"])
def test_operators_and_admins_open_operator_pages(client, request, world, actor, name, args):
    client.force_login(request.getfixturevalue(actor))
    assert client.get(_url(name, args, world), {"position": 0}).status_code == 200


@pytest.mark.parametrize(("name", "args", "data"), ACTIONS)
@pytest.mark.parametrize("actor", ["bob", "carol"])
def test_operators_and_admins_act_and_are_redirected(
    client, request, world, actor, name, args, data
):
    client.force_login(request.getfixturevalue(actor))
    assert client.post(_url(name, args, world), data).status_code == 302
    assert not _unchanged()


def test_the_live_status_poll_needs_a_role(client, dave, world):
    url = reverse("run-statuses") + "?run=r-busy"
    assert client.get(url).status_code == 302
    client.force_login(dave)
    assert client.get(url).status_code == 403
