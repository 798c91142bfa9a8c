"""Every API endpoint checks the same roles as the pages: anonymous 401, no role 403,
every role may read, only operators and admins may act."""

from __future__ import annotations

import pytest

from durableruns.models import Run
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

VIEW, OPERATE, DECIDE = "view", "operate", "decide"
# (method, path, body, what it needs, status when allowed)
ENDPOINTS = [
    ("get", "/api/runs/", None, VIEW, 200),
    ("post", "/api/runs/", {"agent": "t-api", "input": {"text": "new"}}, OPERATE, 201),
    ("get", "/api/runs/recorded/", None, VIEW, 200),
    ("get", "/api/runs/recorded/steps/", None, VIEW, 200),
    ("get", "/api/runs/recorded/effects/", None, VIEW, 200),
    ("get", "/api/effects/", None, VIEW, 200),
    ("get", "/api/effects/{effect}/", None, VIEW, 200),
    ("post", "/api/runs/pending/cancel/", {"reason": "roles test"}, OPERATE, 200),
    ("post", "/api/runs/broken/resume/", None, OPERATE, 200),
    ("post", "/api/runs/recorded/fork/", {"position": 1}, OPERATE, 201),
    ("get", "/api/runs/recorded/fork-preview/?position=1", None, OPERATE, 200),
    ("get", "/api/runs/recorded/replay/", None, OPERATE, 200),
    ("get", "/api/runs/gated/approvals/", None, VIEW, 200),
    ("get", "/api/approvals/", None, VIEW, 200),
    ("get", "/api/approvals/{approval}/", None, VIEW, 200),
    ("post", "/api/approvals/{approval}/decide/", {"decision": "approve"}, DECIDE, 200),
    ("post", "/api/effects/{effect}/resolve/", {"resolution": "not_happened"}, OPERATE, 200),
]
ALLOWED = {
    "alice": {VIEW, DECIDE},
    "bob": {VIEW, OPERATE},
    "carol": {VIEW, OPERATE, DECIDE},
    "dave": set(),
}


def _request(client, method: str, path: str, body):
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, content_type="application/json")


@pytest.fixture
def world(escalated, pending, broken, gated):
    return {"effect": escalated.pk, "approval": gated.approval.pk}


@pytest.mark.parametrize(
    ("method", "path", "body", "needs", "ok"), ENDPOINTS, ids=[f"{m} {p}" for m, p, *_ in ENDPOINTS]
)
@pytest.mark.parametrize("who", ["anonymous", "alice", "bob", "carol", "dave"])
def test_it_applies_the_role_table(request, world, who, method, path, body, needs, ok):
    user = None if who == "anonymous" else request.getfixturevalue(who)
    response = _request(client_for(user), method, path.format(**world), body)
    if user is None:
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Token"
    elif needs in ALLOWED[who]:
        assert response.status_code == ok, response.content
    else:
        assert response.status_code == 403, response.content


def test_a_reviewer_cannot_cancel_and_the_run_is_untouched(alice, pending):
    response = client_for(alice).post("/api/runs/pending/cancel/")
    assert response.status_code == 403
    assert Run.objects.get(pk="pending").status == Run.Status.QUEUED


def test_the_schema_is_served_to_anyone(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert "/api/runs/{run_id}/fork/" in schema["paths"]
