"""Idempotency-Key semantics of @idempotent views (durableruns.idempotency, section 7)."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from django.test import Client, RequestFactory
from django.utils import timezone

from durableruns import tasks
from durableruns.demo.models import ProviderCall
from durableruns.idempotency import prune_idempotency_records, request_fingerprint
from durableruns.models import IdempotencyRecord
from tests.conftest import wait_for
from tests.web import idempotency_urls
from tests.web.idempotency_urls import EXECUTIONS

pytestmark = [pytest.mark.urls("tests.web.idempotency_urls")]


def _key() -> str:
    return f"key-{uuid.uuid4().hex}"


def _post(client: Client, path: str, body: dict, key: str | None):
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post(
        path, data=json.dumps(body), content_type="application/json", headers=headers
    )


# --- Statuses --------------------------------------------------------------------


@pytest.mark.django_db
def test_it_requires_the_key(client):
    response = _post(client, "/test/charge", {"amount": 5}, None)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert "Idempotency-Key header is required" in response.json()["title"]
    assert EXECUTIONS[""] == 0


@pytest.mark.django_db
def test_it_refuses_a_key_longer_than_255_characters(client):
    response = _post(client, "/test/charge", {"amount": 5}, "k" * 256)
    assert response.status_code == 400
    assert EXECUTIONS["k" * 256] == 0


@pytest.mark.django_db
def test_it_executes_without_a_key_where_the_key_is_optional(client):
    assert _post(client, "/test/optional", {}, None).status_code == 201
    assert _post(client, "/test/optional", {}, None).status_code == 201
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.django_db
def test_it_replays_the_stored_response_with_its_status_and_body(client):
    key = _key()
    first = _post(client, "/test/charge", {"amount": 5}, key)
    again = _post(client, "/test/charge", {"amount": 5}, key)

    assert first.status_code == again.status_code == 201
    assert again.content == first.content == b'{"charge": "ch_1", "amount": 5}'
    assert again["Content-Type"] == first["Content-Type"] == "application/json"
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert EXECUTIONS[key] == 1


@pytest.mark.django_db
def test_it_replays_a_stored_client_error(client):
    key = _key()
    first = _post(client, "/test/charge", {"amount": 5000}, key)
    again = _post(client, "/test/charge", {"amount": 5000}, key)

    assert first.status_code == again.status_code == 402
    assert again.json() == {"error": "card declined"}
    assert again["Idempotent-Replayed"] == "true"
    assert EXECUTIONS[key] == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body"),
    [("/test/charge", {"amount": 6}), ("/test/charge?currency=usd", {"amount": 5})],
)
def test_it_refuses_the_same_key_with_a_different_request(client, path, body):
    key = _key()
    _post(client, "/test/charge", {"amount": 5}, key)
    response = _post(client, path, body, key)

    assert response.status_code == 422
    assert "different request" in response.json()["title"]
    assert EXECUTIONS[key] == 1


@pytest.mark.django_db
def test_it_does_not_store_a_server_error(client):
    key = _key()
    assert _post(client, "/test/flaky", {}, key).status_code == 503
    retried = _post(client, "/test/flaky", {}, key)
    replayed = _post(client, "/test/flaky", {}, key)

    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried
    assert replayed.status_code == 201 and replayed["Idempotent-Replayed"] == "true"
    assert EXECUTIONS[key] == 2


@pytest.mark.django_db
def test_it_does_not_store_an_exception_and_rolls_back_the_views_writes():
    client = Client(raise_request_exception=False)
    key = _key()
    assert _post(client, "/test/exploding", {}, key).status_code == 500
    assert not IdempotencyRecord.objects.filter(key=key).exists()
    assert not ProviderCall.objects.filter(idempotency_key=key).exists()
    assert _post(client, "/test/exploding", {}, key).status_code == 201
    assert EXECUTIONS[key] == 2
    assert ProviderCall.objects.filter(idempotency_key=key).count() == 1


def _abandoned_claim(path: str, body: dict, key: str, age: timedelta) -> None:
    """What a request whose process died mid-view leaves behind: its claim only."""
    request = RequestFactory().post(path, data=json.dumps(body), content_type="application/json")
    IdempotencyRecord.objects.create(
        scope="test-ledgered", key=key, fingerprint=request_fingerprint(request)
    )
    _age(key, age)


@pytest.mark.django_db
def test_it_takes_over_a_key_abandoned_past_the_lock_timeout(client, settings):
    settings.DURABLERUNS_IDEMPOTENCY_LOCK_TIMEOUT = 60
    recent, abandoned = _key(), _key()
    _abandoned_claim("/test/ledgered", {}, recent, timedelta(seconds=50))
    _abandoned_claim("/test/ledgered", {}, abandoned, timedelta(seconds=61))

    assert _post(client, "/test/ledgered", {}, recent).status_code == 409
    assert _post(client, "/test/ledgered", {}, abandoned).status_code == 201
    assert _post(client, "/test/ledgered", {}, abandoned)["Idempotent-Replayed"] == "true"
    assert _post(client, "/test/ledgered", {"other": 1}, abandoned).status_code == 422
    assert ProviderCall.objects.filter(idempotency_key=abandoned).count() == 1
    assert EXECUTIONS[recent] == 0


@pytest.mark.django_db(transaction=True)
def test_it_commits_once_when_a_slow_request_is_taken_over(live_server, settings):
    settings.DURABLERUNS_IDEMPOTENCY_LOCK_TIMEOUT = 0.3
    key = _key()
    url = f"{live_server.url}/test/ledgered"
    body = {"pause": 1.0}
    first: list[httpx.Response] = []
    slow = threading.Thread(
        target=lambda: first.append(
            httpx.post(url, json=body, headers={"Idempotency-Key": key}, timeout=30)
        )
    )
    slow.start()
    wait_for(
        lambda: IdempotencyRecord.objects.filter(
            key=key, created_at__lt=timezone.now() - timedelta(seconds=0.3)
        ).exists(),
        message="the first request to outlive the lock timeout",
    )
    second = httpx.post(url, json=body, headers={"Idempotency-Key": key}, timeout=30)
    slow.join(timeout=30)

    assert EXECUTIONS[key] == 2, "both requests ran the view"
    assert first[0].status_code == 409, "the superseded request rolled back"
    assert second.status_code == 201
    assert ProviderCall.objects.filter(idempotency_key=key).count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_answers_409_while_the_first_request_is_in_flight(live_server):
    key = _key()
    url = f"{live_server.url}/test/charge"
    body = {"amount": 5, "pause": 2.0}
    first: list[httpx.Response] = []
    slow = threading.Thread(
        target=lambda: first.append(
            httpx.post(url, json=body, headers={"Idempotency-Key": key}, timeout=30)
        )
    )
    slow.start()
    wait_for(
        lambda: IdempotencyRecord.objects.filter(
            key=key, state=IdempotencyRecord.State.IN_FLIGHT
        ).exists(),
        message="the first request",
    )
    concurrent = httpx.post(url, json=body, headers={"Idempotency-Key": key}, timeout=30)
    slow.join(timeout=30)

    assert concurrent.status_code == 409
    assert concurrent.headers["Retry-After"] == "1"
    assert first[0].status_code == 201
    assert EXECUTIONS[key] == 1


@pytest.mark.django_db(transaction=True)
def test_it_executes_fifty_concurrent_requests_with_one_key_once(live_server):
    key = _key()
    url = f"{live_server.url}/test/charge"
    # The first stays in flight until one of the others was answered (at most 30 s).
    body = {"amount": 5, "pause": 30, "until_overlap": True}
    start = threading.Barrier(49)

    def send(n: int) -> httpx.Response:
        # The first goes alone; the other 49 go together once it is executing, so some
        # surely arrive while it is in flight, however slowly the machine schedules.
        if n:
            assert idempotency_urls.CHARGING.wait(timeout=30), "the first charge never began"
            start.wait(timeout=30)
        # Fifty connects at once can overflow the live server's listen backlog; a real
        # client retries a reset connection with the same key, which is the point.
        for attempt in range(5):
            try:
                response = httpx.post(url, json=body, headers={"Idempotency-Key": key}, timeout=60)
            except httpx.TransportError:
                if attempt == 4:
                    raise
                continue
            if response.status_code == 409:
                idempotency_urls.OVERLAPPED.set()
            return response
        raise AssertionError("unreachable")

    idempotency_urls.CHARGING.clear()
    idempotency_urls.OVERLAPPED.clear()
    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(send, range(50)))

    assert EXECUTIONS[key] == 1
    statuses = Counter((r.status_code, r.headers.get("Idempotent-Replayed")) for r in responses)
    assert statuses[(201, None)] == 1, statuses
    assert statuses[(409, None)] >= 1, "the requests must overlap"
    assert set(statuses) <= {(201, None), (409, None), (201, "true")}, statuses
    original = next(r for r in responses if r.status_code == 201)
    assert all(r.content == original.content for r in responses if r.status_code == 201)


# --- Retention -------------------------------------------------------------------------


def _age(key: str, by: timedelta) -> None:
    IdempotencyRecord.objects.filter(key=key).update(created_at=timezone.now() - by)


@pytest.mark.django_db
def test_it_prunes_keys_after_the_retention(client, settings):
    settings.DURABLERUNS_IDEMPOTENCY_RETENTION = 3600
    old, recent = _key(), _key()
    _post(client, "/test/charge", {"amount": 5}, old)
    _post(client, "/test/charge", {"amount": 5}, recent)
    _age(old, timedelta(seconds=3601))
    _age(recent, timedelta(seconds=3500))

    assert prune_idempotency_records() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == [recent]
    assert _post(client, "/test/charge", {"amount": 5}, old).get("Idempotent-Replayed") is None
    assert EXECUTIONS[old] == 2


@pytest.mark.django_db
def test_it_treats_an_expired_key_as_new_even_before_the_prune(client, settings):
    settings.DURABLERUNS_IDEMPOTENCY_RETENTION = 60
    key = _key()
    _post(client, "/test/charge", {"amount": 5}, key)
    _age(key, timedelta(seconds=61))

    response = _post(client, "/test/charge", {"amount": 6}, key)
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    assert EXECUTIONS[key] == 2


@pytest.mark.django_db
def test_it_prunes_periodically_from_the_sweep_leader(client, settings, leader_tick):
    schedule = {job.__self__.name: interval for interval, job in tasks.periodic_jobs()}
    assert schedule["durableruns.prune_idempotency_records"] == (
        settings.DURABLERUNS_IDEMPOTENCY_PRUNE_INTERVAL
    )
    old, recent = _key(), _key()
    _post(client, "/test/charge", {"amount": 5}, old)
    _post(client, "/test/charge", {"amount": 5}, recent)
    _age(old, timedelta(days=8))

    leader_tick()

    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == [recent]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sent", [0, 7], ids=["no body", "half a body"])
def test_a_request_cut_off_before_its_body_ends_claims_nothing(live_server, sent):
    """A client killed between its headers and the end of its body (a worker SIGKILLed
    mid-call): the server reads a short body; claiming the key with it executed the
    view on `{}` and answered the real request's retry 422, "a different request"."""
    key = _key()
    body = json.dumps({"amount": 5}).encode()
    address = live_server.url.removeprefix("http://").split(":")
    head = (
        f"POST /test/charge HTTP/1.1\r\nHost: {address[0]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Idempotency-Key: {key}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((address[0], int(address[1])), timeout=10) as cut:
        cut.sendall(head + body[:sent])
        cut.shutdown(socket.SHUT_WR)  # the process died: nothing more will come
        answer = cut.recv(4096).split(b"\r\n", 1)[0]

    retry = httpx.post(
        f"{live_server.url}/test/charge", content=body, timeout=30,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )  # fmt: skip

    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert (retry.status_code, retry.json()["amount"]) == (201, 5)
    assert EXECUTIONS[key] == 1
