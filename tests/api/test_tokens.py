"""API tokens: stored as digests, with an expiry, a last-used time and revocation."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from durableruns.models import ApiToken, AuditEvent
from durableruns.services import tokens

pytestmark = pytest.mark.django_db
URL = "/api/runs/"


def _get(token: str, scheme: str = "Token"):
    return Client().get(URL, HTTP_AUTHORIZATION=f"{scheme} {token}")


def _createtoken(*args: str) -> str:
    out = StringIO()
    call_command("createtoken", *args, stdout=out)
    return out.getvalue().strip()


def test_a_fresh_token_authenticates_and_records_its_use(bob):
    token = _createtoken("bob", "--name", "ci")
    assert _get(token).status_code == 200
    row = ApiToken.objects.get(user=bob)
    assert row.last_used_at is not None and row.name == "ci"
    assert row.expires_at > timezone.now() + timedelta(days=89)


def test_the_database_holds_no_usable_token(bob):
    token = _createtoken("bob")
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM durableruns_apitoken")
        stored = [str(value) for row in cursor.fetchall() for value in row]
    secret = token.split("_", 2)[2]  # dr_<hex prefix>_<secret>; the secret may hold "_"
    assert len(secret) == 43
    assert not any(secret in value or token in value for value in stored)
    assert hashlib.sha256(token.encode()).hexdigest() in stored  # only its digest
    # Whatever is stored, presented as a token, is refused.
    for value in stored:
        assert _get(value).status_code == 401
    assert connection.introspection.table_names().count("authtoken_token") == 0


def test_an_expired_token_gets_401(bob):
    token = tokens.issue(bob)
    ApiToken.objects.filter(user=bob).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _get(token)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_a_revoked_token_gets_401_and_the_revocation_is_audited(bob):
    token = tokens.issue(bob)
    prefix = ApiToken.objects.get(user=bob).prefix
    out = StringIO()
    call_command("tokens", "bob", "--revoke", prefix, stdout=out)
    assert "revoked" in out.getvalue()
    assert _get(token).status_code == 401
    assert AuditEvent.objects.filter(
        action="token.revoke", target_id=str(ApiToken.objects.get().pk)
    )


def test_rotating_revokes_the_old_tokens(bob):
    old = _createtoken("bob")
    new = _createtoken("bob", "--rotate")
    assert _get(old).status_code == 401
    assert _get(new).status_code == 200


def test_tokens_are_listed_per_user(bob, carol):
    tokens.issue(bob, name="deploy")
    tokens.issue(carol, name="carols")
    out = StringIO()
    call_command("tokens", "bob", stdout=out)
    assert "deploy" in out.getvalue() and "live" in out.getvalue()
    assert "carols" not in out.getvalue()


@pytest.mark.parametrize(
    "token",
    ["dr_000000000000_" + "A" * 43, "not-a-token", "dr_\x00", "Token", "é" * 10],
)
def test_a_made_up_token_gets_401(bob, token):
    tokens.issue(bob)
    assert _get(token.encode("utf-8").decode("latin-1")).status_code == 401


def test_metrics_accept_only_a_bearer_token(client, settings):
    settings.DURABLERUNS_METRICS_TOKEN = "a-metrics-token-for-tests"
    assert client.get("/metrics", HTTP_AUTHORIZATION="a-metrics-token-for-tests").status_code == 401
    assert (
        client.get("/metrics", HTTP_AUTHORIZATION="Token a-metrics-token-for-tests").status_code
        == 401
    )
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer a-metrics-token-for-tests")
    assert ok.status_code == 200
