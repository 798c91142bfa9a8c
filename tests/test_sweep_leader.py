"""The sweep leader's lock (services/sweeper.py) when its holder is frozen, not dead:
the holder's session lives on, so only a follower can free the lock."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from durableruns.models import SweeperBeat
from durableruns.services.sweeper import LEADER_LOCK, SweepLeader

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen_leader():
    """Another session holding the leader lock, as a SIGSTOPped worker's would."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    other = psycopg.connect(**params, autocommit=True)
    other.execute("SELECT pg_advisory_lock(%s, %s)", list(LEADER_LOCK))
    yield other
    other.close()


def _swept(seconds_ago: float) -> None:
    swept_at = timezone.now() - timedelta(seconds=seconds_ago)
    SweeperBeat.objects.update_or_create(id=1, defaults={"swept_at": swept_at, "runs_rung": 0})


def _release() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(LEADER_LOCK))


def test_a_follower_ends_a_frozen_leaders_session_once_the_sweep_is_long_stale(
    frozen_leader, settings
):
    _swept(
        seconds_ago=10
        * settings.DURABLERUNS_SWEEP_STALE_AFTER
        * settings.DURABLERUNS_SWEEP_INTERVAL
    )
    follower = SweepLeader()
    try:
        assert follower._lead() is False  # the lock is held: it deposes, then waits a tick
        with pytest.raises(psycopg.OperationalError):
            frozen_leader.execute("SELECT 1")
        assert follower._lead() is True
    finally:
        _release()


def test_a_leader_that_swept_recently_is_left_alone(frozen_leader, settings):
    _swept(seconds_ago=0)
    follower = SweepLeader()
    assert follower._lead() is False
    assert follower._lead() is False
    assert frozen_leader.execute("SELECT 1").fetchone() == (1,)
