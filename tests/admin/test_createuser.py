"""manage.py createuser: reviewers, operators and admins (Django groups, roles.py)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from durableruns import roles
from durableruns.models import AuditEvent

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-passphrase-9"


def _create(monkeypatch, *args: str, password: str = PASSWORD) -> str:
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    out = io.StringIO()
    call_command("createuser", *args, "--password-stdin", stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("role", "granted", "withheld"),
    [
        ("reviewer", roles.DECIDE_APPROVALS, roles.OPERATE_RUNS),
        ("operator", roles.OPERATE_RUNS, roles.DECIDE_APPROVALS),
        ("admin", roles.MANAGE_POLICIES, None),
    ],
)
def test_it_creates_a_user_with_the_role(monkeypatch, client, role, granted, withheld):
    out = _create(monkeypatch, "dana", "--role", role)
    assert out.strip() == f"created dana: {role}"
    dana = get_user_model().objects.get(username="dana")
    assert dana.has_perm(roles.VIEW_RUNS) and dana.has_perm(granted)
    assert withheld is None or not dana.has_perm(withheld)
    assert client.login(username="dana", password=PASSWORD)


def test_it_adds_a_role_to_an_existing_user_and_keeps_the_password(monkeypatch, client):
    _create(monkeypatch, "dana", "--role", "reviewer")
    out = io.StringIO()
    call_command("createuser", "dana", "--role", "operator", stdout=out)
    assert out.getvalue().strip() == "updated dana: operator, reviewer"
    assert client.login(username="dana", password=PASSWORD)


def test_repeating_it_is_harmless_and_audited_once(monkeypatch):
    _create(monkeypatch, "dana", "--role", "admin")
    call_command("createuser", "dana", "--role", "admin", stdout=io.StringIO())
    assert get_user_model().objects.filter(username="dana").count() == 1
    event = AuditEvent.objects.get(action="user.grant_roles")
    assert (event.actor_name, event.before, event.after) == (
        "system",
        {"roles": []},
        {"roles": ["admin"]},
    )


def test_it_refuses_an_unknown_role_and_creates_nothing(monkeypatch):
    with pytest.raises(CommandError, match="invalid choice: 'root'"):
        _create(monkeypatch, "dana", "--role", "root")
    assert not get_user_model().objects.exists()


def test_it_refuses_a_weak_password_and_creates_nothing(monkeypatch):
    with pytest.raises(CommandError, match=r"too short|too common"):
        _create(monkeypatch, "dana", "--role", "reviewer", password="abc")
    assert not get_user_model().objects.exists()


@pytest.mark.parametrize("name", ["da na", "dana\x00", "d" * 200])
def test_it_refuses_a_bad_username_and_creates_nothing(monkeypatch, name):
    with pytest.raises(CommandError):
        _create(monkeypatch, name, "--role", "reviewer")
    assert not get_user_model().objects.exists()


def test_it_refuses_a_password_for_an_existing_user(monkeypatch):
    _create(monkeypatch, "dana", "--role", "reviewer")
    with pytest.raises(CommandError, match="changepassword"):
        _create(monkeypatch, "dana", "--role", "operator", password="another-passphrase-7")


def test_without_a_password_the_user_cannot_log_in_yet(client):
    call_command("createuser", "erin", "--role", "operator", "--no-password", stdout=io.StringIO())
    erin = get_user_model().objects.get(username="erin")
    assert not erin.has_usable_password()
    assert erin.has_perm(roles.OPERATE_RUNS)
