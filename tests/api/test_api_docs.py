"""Browsable API docs: Swagger UI from local static files, working under the CSP."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_the_docs_page_loads_its_assets_from_this_server(client):
    response = client.get(reverse("api-docs"))
    body = response.content.decode()
    assert response.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', body)
    assert sources and all(src.startswith("/") and not src.startswith("//") for src in sources)
    assert "<script>" not in body  # no inline script: the CSP allows only 'self'
    assert "<style" not in body  # nor inline style (templates/durableruns/api_docs.html)
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp


def test_the_docs_scripts_exist_and_point_at_the_schema(client):
    body = client.get(reverse("api-docs")).content.decode()
    for path in re.findall(r'src="/static/([^"?]+)"', body):
        assert finders.find(path), path
    init = re.search(r'src="([^"]+\?[^"]*script[^"]*)"', body).group(1).replace("&amp;", "&")
    script = client.get(init)
    assert script["Content-Type"].startswith("application/javascript")
    assert reverse("api-schema") in script.content.decode()


def test_the_schema_is_generated_once_and_served_alike_in_every_format(client, monkeypatch):
    """Anyone may ask for it without logging in: generating it took 25 ms of CPU a time."""
    from drf_spectacular.generators import SchemaGenerator

    from durableruns.api import schema

    monkeypatch.setattr(schema._OncePerProcess, "_public", {})
    generated = []
    original = SchemaGenerator.get_schema

    def counted(self, request=None, public=False):
        generated.append(public)
        return original(self, request=request, public=public)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    first = client.get(reverse("api-schema"))
    again = client.get(reverse("api-schema"))
    as_json = client.get(reverse("api-schema") + "?format=json")
    assert generated == [True]
    assert first.status_code == again.status_code == as_json.status_code == 200
    assert first.content == again.content and b"/api/runs/" in first.content
    assert as_json["Content-Type"] == "application/vnd.oai.openapi+json"
    assert sorted(json.loads(as_json.content)["paths"]) == sorted(
        re.findall(r"^  (/api/\S+):$", first.content.decode(), re.M)
    )
