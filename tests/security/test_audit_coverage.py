"""Every state-changing URL a person uses records who did what in the audit log.

Built from the same URL list as the role matrix: a new POST URL must get a row in
ACTIONS (its valid request and expected audit action) or be listed as exempt."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from durableruns.models import AuditEvent, RedactionRule, RetentionPolicy, Run
from tests.security.test_url_matrix import EXPECTED, KNOWN

pytestmark = pytest.mark.django_db

POLICY = {
    "name": "p2",
    "agent": "",
    "statuses": ["failed"],
    "age_days": "30",
    "action": "delete",
    "enabled": "on",
    "confirm": "save",
}
# name -> (url kwargs, valid form data, expected audit action)
ACTIONS = {
    "policy-create": ({}, POLICY, "policy.create"),
    "policy-update": ({"pk": "policy"}, POLICY, "policy.update"),
    "policy-delete": ({"pk": "policy"}, {}, "policy.delete"),
    "policies-apply": ({}, {"dry_run": "1"}, "retention.apply"),
    "redaction-rule-create": ({}, {"kind": "key", "value": "ssn"}, "redaction_rule.create"),
    "redaction-rule-delete": ({"pk": "rule"}, {}, "redaction_rule.delete"),
    "run-hold": ({"run_id": "free"}, {}, "run.legal_hold"),
    "run-release": ({"run_id": "held"}, {}, "run.legal_hold_clear"),
}
# Not a person's action on the product's data: signing out, and the demo's stand-in
# providers (an HTTP API the demo tools call, which keeps its own ledger).
EXEMPT = {"logout", "provider-dedupe", "provider-execute"}
POST_URLS = [name for name in KNOWN if EXPECTED[name].method == "POST"]


def test_every_state_changing_url_is_audited_or_exempt():
    missing = sorted(set(POST_URLS) - set(ACTIONS) - EXEMPT)
    assert not missing, f"add these to ACTIONS in {__file__}: {missing}"


@pytest.mark.parametrize("name", [n for n in POST_URLS if n in ACTIONS])
def test_it_records_the_action(name, carol):
    for run_id, held in (("free", False), ("held", True)):
        Run.objects.create(
            id=run_id,
            agent="refund-bot",
            agent_version="1",
            input={},
            status=Run.Status.SUCCEEDED,
            max_steps=5,
            max_duration_seconds=60,
            legal_hold=held,
        )
    objects = {
        "policy": RetentionPolicy.objects.create(
            name="p", statuses=["failed"], age_days=30, action="delete"
        ).pk,
        "rule": RedactionRule.objects.create(kind="key", value="employee_id").pk,
    }
    kwargs, data, action = ACTIONS[name]
    client = Client()
    client.force_login(carol)
    response = client.post(
        reverse(name, kwargs={k: objects.get(v, v) for k, v in kwargs.items()}), data
    )
    assert response.status_code == 302
    event = AuditEvent.objects.get()
    assert (event.actor_name, event.action) == ("carol", action)
