"""The audit log page (admins): newest first, filtered by actor, action, run and time,
paged by position. A filter that is not valid says so (400) and shows no event."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from durableruns.models import Approval, AuditEvent
from durableruns.services import audit
from durableruns.web import audit_log
from tests.admin.factories import make_run

pytestmark = pytest.mark.django_db


def _page(user, **query) -> tuple[int, str]:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("audit-log"), query)
    return response.status_code, response.content.decode()


def _rows(body: str) -> int:
    return body.split("<tbody>")[1].split("</tbody>")[0].count("<tr>")


class Trail:
    approval: Approval
    between: str  # a time after alice's rejection and before bob's actions


@pytest.fixture
def trail(alice, bob) -> Trail:
    """alice rejects r-1's approval; then bob cancels r-1 and resumes r-2."""
    r1, r2 = make_run("r-1", "cancelled"), make_run("r-2", "failed")
    trail = Trail()
    trail.approval = Approval.objects.create(run=r1, position=0, name="pay", allowed=["approve"])
    audit.record(alice, "approval.reject", trail.approval)
    trail.between = timezone.now().strftime("%Y-%m-%dT%H:%M:%S.%f")
    audit.record(bob, "run.cancel", r1, before={"status": "running"}, after={"status": "cancelled"})
    audit.record(bob, "run.resume", r2)
    return trail


def test_it_lists_every_action_newest_first_with_links(carol, trail):
    status, body = _page(carol)
    assert status == 200 and _rows(body) == 3
    assert body.index("run.resume") < body.index("run.cancel") < body.index("approval.reject")
    assert f'href="/approvals/{trail.approval.pk}/"' in body and 'href="/runs/r-1/"' in body
    assert "&quot;status&quot;: &quot;cancelled&quot;" in body


def test_it_filters_by_actor_action_run_and_time(carol, trail):
    assert _rows(_page(carol, actor="alice")[1]) == 1
    assert _rows(_page(carol, action="run.")[1]) == 2
    # A run's trail includes its approvals' decisions.
    body = _page(carol, run="r-1")[1]
    assert _rows(body) == 2 and "run.resume" not in body
    assert "approval.reject" not in _page(carol, since=trail.between)[1]
    assert _rows(_page(carol, until=trail.between)[1]) == 1


def test_it_pages_by_position_without_counting(carol, trail, monkeypatch):
    monkeypatch.setattr(audit_log, "PAGE", 2)
    first = _page(carol)[1]
    assert _rows(first) == 2 and "Older actions" in first
    before = AuditEvent.objects.order_by("-pk")[1].pk
    older = _page(carol, before=before)[1]
    assert _rows(older) == 1 and "approval.reject" in older and "Older actions" not in older


@pytest.mark.parametrize(
    "query",
    [
        {"actor": "b" * 151},
        {"since": "yesterday"},
        {"since": "2026-12-02T10:00", "until": "2026-12-01T10:00"},
        {"action": "x" * 61},
        {"before": "-1"},
    ],
)
def test_a_filter_that_is_not_valid_says_so_and_shows_nothing(carol, trail, query):
    status, body = _page(carol, **query)
    assert status == 400 and "Not filtered" in body
    assert _rows(body) == 1 and "the filter is not valid" in body


def test_a_nul_in_a_filter_is_refused_before_the_page(carol, trail):
    status, body = _page(carol, actor="bob\x00")
    assert status == 400 and "NUL" in body and "run.cancel" not in body


@pytest.mark.parametrize("since", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_a_time_out_of_range_in_utc_is_refused_not_a_server_error(carol, trail, since):
    status, body = _page(carol, since=since)
    assert status == 400 and "out of range" in body


def test_a_time_with_an_offset_postgres_refuses_is_taken_in_utc(carol, trail):
    # +20:00 is beyond Postgres's ±15:59; in UTC it is an ordinary time.
    status, body = _page(carol, since="2000-01-01T00:00:00+20:00")
    assert status == 200 and _rows(body) == 3
