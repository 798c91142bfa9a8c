"""Unicode digits ("²", "٣") pass str.isdigit() but not int(): every number a client
sends is read as ASCII digits, and anything else is a 400 that changes nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from durableruns.engine import registry
from durableruns.models import Run
from tests.web import agents as _test_agents  # noqa: F401 - registers t-ledger
from tests.web.dashboard import make_run
from tests.web.test_approvals import _pending, rung  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("after", ["²", "٣", "\uff11"])
def test_the_inbox_poll_refuses_a_cursor_of_unicode_digits(client, alice, after):
    _pending("r-poll")
    client.force_login(alice)
    response = client.get(reverse("approvals"), {"after": after}, headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert "after is not a whole number" in response.content.decode()


@pytest.mark.parametrize("done", ["²", "٣", "-1", "9" * 30])
def test_a_bulk_batch_refuses_a_progress_count_of_unicode_digits_and_changes_nothing(
    client, bob, done
):
    make_run("a", status="running")
    client.force_login(bob)
    form = {"do": "cancel:filtered", "reason": "drain", "done_so_far": done}
    response = client.post(reverse("runs-bulk"), form, headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert "done_so_far" in response.content.decode()
    assert Run.objects.get(pk="a").status == "running"


def test_an_agent_version_with_unicode_digits_still_orders():
    versions = ["1.10", "1.²", "1.9", "1.x", "2"]
    assert sorted(versions, key=registry._version_order) == ["1.9", "1.10", "1.x", "1.²", "2"]


@pytest.mark.parametrize("declared", ["²", "١٢", "1²"])
def test_a_content_length_of_unicode_digits_is_no_server_error(client, alice, declared):
    """A Content-Length of anything but ASCII digits is malformed HTTP: a 400, whether
    `int()` refuses it ("²") or would read it ("١٢" is 12 to Python)."""
    client.force_login(alice)
    answer = client.generic(
        "POST", reverse("approvals"), b"", content_type="application/json",
        CONTENT_LENGTH=declared,
    )  # fmt: skip
    assert answer.status_code == 400
    assert b"Content-Length" in answer.content
