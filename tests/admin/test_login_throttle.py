"""Login attempts are throttled per username and per client address."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _two_failures(settings):
    # Password hashing is slow on purpose; two failures (eight per address) keep it quick.
    settings.DURABLERUNS_LOGIN_MAX_FAILURES = 2


def _attempt(client, username: str, password: str):
    return client.post(reverse("login"), {"username": username, "password": password})


def test_it_refuses_a_username_after_the_failures_even_with_the_right_password(client, carol):
    for _ in range(2):
        assert _attempt(client, "carol", "wrong").status_code == 200
    response = _attempt(client, "carol", "carol-password-1")
    assert response.status_code == 429
    assert "Too many failed attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_still_lets_other_users_in(client, carol, bob):
    for _ in range(2):
        _attempt(client, "carol", "wrong")
    assert _attempt(client, "bob", "bob-password-1").status_code == 302


def test_a_success_clears_the_username_count(client, carol):
    _attempt(client, "carol", "wrong")
    assert _attempt(client, "carol", "carol-password-1").status_code == 302
    client.logout()
    _attempt(client, "carol", "wrong")
    assert _attempt(client, "carol", "carol-password-1").status_code == 302


def test_it_throttles_an_address_that_tries_many_usernames(client, carol):
    from durableruns.web.login_throttle import forget

    names = [f"guess{index}" for index in range(8)]
    for name in names:
        _attempt(client, name, "wrong")
    response = _attempt(client, "carol", "carol-password-1")
    for name in names:
        forget(name, "127.0.0.1")
    assert response.status_code == 429


def test_the_login_page_still_renders(client):
    assert client.get(reverse("login")).status_code == 200
