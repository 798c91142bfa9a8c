"""Errors are answered in the site's layout, with navigation (pages), or as RFC 9457
problem details (API)."""

from __future__ import annotations

import pytest
from django.test import Client

from durableruns.models import Run

pytestmark = pytest.mark.django_db


def _in_layout(body: str, status: int) -> None:
    assert 'class="brand" href="/"' in body  # the site's header
    assert f"<h1>{status} ·" in body
    assert 'href="/">Back to the runs</a>' in body


def test_a_missing_run_is_a_404_page_with_navigation(client, alice):
    client.force_login(alice)
    response = client.get("/runs/no-such-run/")
    assert response.status_code == 404
    body = response.content.decode()
    _in_layout(body, 404)
    assert 'href="/effects/">Effects</a>' in body


def test_a_forbidden_page_is_a_403_page(client, alice):
    client.force_login(alice)
    response = client.get("/manage/policies/")
    assert response.status_code == 403
    _in_layout(response.content.decode(), 403)


def test_malformed_input_is_a_400_page_naming_the_parameter(client, alice):
    client.force_login(alice)
    response = client.get("/", {"q": "\x00"})
    assert response.status_code == 400
    body = response.content.decode()
    _in_layout(body, 400)
    assert "q contains a NUL character" in body


def test_the_api_answers_problem_details(client, alice):
    client.force_login(alice)
    response = client.get("/api/runs/", {"agent": "a\x00"})
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": "agent contains a NUL character",
    }


def test_a_server_error_is_a_500_page_without_details(alice, monkeypatch):
    from durableruns.web import views

    def broken(*args, **kwargs):
        raise RuntimeError("/srv/secret/path exploded")

    Run.objects.create(
        id="r1", agent="a", agent_version="1", input={}, max_steps=1, max_duration_seconds=1
    )
    monkeypatch.setattr(views, "run_context", broken)
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/runs/r1/")
    assert response.status_code == 500
    body = response.content.decode()
    _in_layout(body, 500)
    assert "/srv/secret/path" not in body
