"""A decision's doorbell rings only once the decision has committed: the worker it
wakes reads the run from another connection, and must find it approved and queued,
not still pending (in which case it would go back to sleep until the sweeper rings).
Unlike the rest of the web tests, nothing here stubs `doorbell.ring`: only the port
behind it, which looks at the database from a second connection as a worker would."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from durableruns.models import Approval, Run
from tests.web.test_approvals import _client, _decide, _pending

pytestmark = pytest.mark.django_db(transaction=True)

SEEN: list[tuple[str, str, str]] = []


class WorkerEyesDoorbell:
    """Records what a worker would read when the message arrives: the run's status
    and its approval's state, from its own connection."""

    def ring(self, run_id: str, countdown: float | None) -> None:
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        with psycopg.connect(**params) as worker:
            row = worker.execute(
                "SELECT r.status, a.state FROM durableruns_run r "
                "JOIN durableruns_approval a ON a.run_id = r.id WHERE r.id = %s",
                [run_id],
            ).fetchone()
        assert row is not None
        SEEN.append((run_id, *row))


@pytest.fixture
def worker_eyes(settings) -> list[tuple[str, str, str]]:
    settings.DURABLERUNS_DOORBELL = f"{__name__}.WorkerEyesDoorbell"
    SEEN.clear()
    return SEEN


def test_a_decision_rings_the_doorbell_only_after_it_commits(alice, worker_eyes):
    approval = _pending("r-commit")
    response = _decide(_client(alice), approval, "approve")
    assert response.status_code in (200, 302)
    assert worker_eyes == [("r-commit", Run.Status.QUEUED, Approval.State.APPROVED)]
