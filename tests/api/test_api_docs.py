"""Browsable API docs: Swagger UI from local static files, working under the CSP."""

from __future__ import annotations

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
