"""Login attempts are throttled per (username, address) and per username, never per
address alone, so nobody can lock out everyone behind one address."""

from __future__ import annotations

import re
import threading
import uuid

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from durableruns.web import login_throttle

pytestmark = pytest.mark.django_db


def _attempt(client, username: str, password: str, **extra):
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def test_five_failures_lock_that_username_only(client, carol, bob):
    for _ in range(5):
        assert _attempt(client, "carol", "wrong").status_code == 200
    refused = _attempt(client, "carol", "carol-password-1")
    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
    assert _attempt(client, "bob", "bob-password-1").status_code == 302


def test_the_lockout_says_when_to_try_again(client, carol, settings):
    settings.DURABLERUNS_LOGIN_WINDOW = 900
    for _ in range(6):
        response = _attempt(client, "carol", "wrong")
    assert response.status_code == 429
    assert 850 <= int(response["Retry-After"]) <= 900
    body = response.content.decode()
    assert re.search(r"Try again in 15 minutes \(at \d\d:\d\d UTC\)", body)
    assert 'href="/login/"' in body or "Runs" in body  # the site's layout, not a bare 429


def test_a_hundred_failures_for_random_usernames_lock_out_nobody(client, carol, bob):
    names = [f"guess-{uuid.uuid4().hex[:8]}" for _ in range(100)]
    try:
        for name in names:
            assert _attempt(client, name, "wrong").status_code == 200
        assert _attempt(client, "carol", "carol-password-1").status_code == 302
        client.logout()
        assert _attempt(client, "bob", "bob-password-1").status_code == 302
    finally:
        for name in names:
            login_throttle.forget(name, "127.0.0.1")


def test_the_username_stays_open_from_another_address_until_it_fails_everywhere(carol, settings):
    settings.DURABLERUNS_LOGIN_MAX_FAILURES = 2  # so 8 failures lock the username everywhere
    net = uuid.uuid4().int % 250  # counters outlive a test run: fresh addresses each time
    addresses = [f"10.{net}.0.{n}" for n in range(1, 6)]
    for address in addresses[:4]:
        for _ in range(2):
            _attempt(Client(), "carol", "wrong", REMOTE_ADDR=address)
        assert _attempt(Client(), "carol", "wrong", REMOTE_ADDR=address).status_code == 429
    assert login_throttle.failures("carol", addresses[0]) == (3, 12)
    # 12 > 8: locked now from a fifth, fresh address too.
    assert (
        _attempt(Client(), "carol", "carol-password-1", REMOTE_ADDR=addresses[4]).status_code == 429
    )


def test_a_fresh_address_gets_in_while_another_is_locked_out(carol):
    for _ in range(6):
        _attempt(Client(), "carol", "wrong", REMOTE_ADDR="10.0.0.9")
    assert (
        _attempt(Client(), "carol", "carol-password-1", REMOTE_ADDR="10.0.0.8").status_code == 302
    )


def test_a_success_clears_the_count(client, carol):
    for _ in range(4):
        _attempt(client, "carol", "wrong")
    assert _attempt(client, "carol", "carol-password-1").status_code == 302
    assert login_throttle.failures("carol", "127.0.0.1") == (0, 0)


@pytest.mark.parametrize(
    ("proxies", "forwarded", "seen"),
    [
        (0, "6.6.6.6", "10.0.0.1"),  # no proxy: the header is the client's own claim
        (1, "6.6.6.6, 203.0.113.7", "203.0.113.7"),  # forged entry left of the proxy's
        (2, "6.6.6.6, 203.0.113.7, 10.1.1.1", "203.0.113.7"),
        (2, "203.0.113.7", "203.0.113.7"),  # fewer entries than proxies
        (1, "", "10.0.0.1"),
    ],
)
def test_it_reads_the_client_address_behind_trusted_proxies(proxies, forwarded, seen, settings):
    from django.test import RequestFactory

    settings.DURABLERUNS_TRUSTED_PROXIES = proxies
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forwarded)
    assert login_throttle.client_address(request) == seen


def test_behind_one_proxy_users_sharing_it_are_counted_apart(client, carol, bob, settings):
    settings.DURABLERUNS_TRUSTED_PROXIES = 1
    for n in range(6):
        _attempt(client, "carol", "wrong", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
    assert (
        _attempt(client, "bob", "bob-password-1", HTTP_X_FORWARDED_FOR="198.51.100.0").status_code
        == 302
    )


def test_the_login_page_still_renders(client):
    assert client.get(reverse("login")).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_failures_for_one_user_count_twenty(live_server, carol):
    """Real concurrent requests to a threaded server: each takes its slot before its
    password is checked, so all 20 are counted and at most 5 are evaluated."""
    barrier = threading.Barrier(20)
    statuses: list[int] = []

    def guess() -> None:
        with httpx.Client(base_url=live_server.url) as http:
            page = http.get("/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]
            barrier.wait(timeout=30)
            answer = http.post(
                "/login/",
                data={"username": "carol", "password": "wrong", "csrfmiddlewaretoken": token},
            )
            statuses.append(answer.status_code)

    threads = [threading.Thread(target=guess) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(set(statuses)) == [200, 429] and len(statuses) == 20
    assert statuses.count(200) == 5  # evaluated: exactly the limit, however they raced
    assert login_throttle.failures("carol", "127.0.0.1") == (20, 20)
