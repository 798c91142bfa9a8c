"""Fuzz the JSON API against its own OpenAPI schema (schemathesis, in process over WSGI).

Every operation gets a dozen generated requests, authenticated as an admin;
each request is sent once as generated and, when it names a run, once more against
a real recorded run, so the success responses are checked against the schema too.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from durableruns.wsgi import application

pytestmark = pytest.mark.django_db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Bounded: a dozen examples per operation, no coverage or stateful phases (seconds, not minutes).
CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"max-examples": 12},
        "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
    }
)


# Loaded from the app itself (GET /api/schema/ over WSGI), at collection time: the
# schema view needs no database. (schemathesis' lazy from_fixture() does not work
# with pytest 9.)
schema = schemathesis.openapi.from_wsgi("/api/schema/", application, config=CONFIG)


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    # Like Django's test client: keep the test's connection (and transaction) open
    # across in-process requests instead of closing it when each request finishes.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(carol) -> str:
    from durableruns.services import tokens

    return tokens.issue(carol, name="schemathesis")


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_the_api_answers_every_request_within_its_schema(case, admin_token, recorded):
    headers = {"Authorization": f"Token {admin_token}"}
    case.call_and_validate(headers=headers, checks=CHECKS)
    if "run_id" in (case.path_parameters or {}):
        case.path_parameters["run_id"] = recorded.id
        case.call_and_validate(headers=headers, checks=CHECKS)
