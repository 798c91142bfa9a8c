"""The fence check and a lease takeover racing: the step commit reads the run row FOR
SHARE, so it waits for a takeover in flight and then sees the new fence (engine/store.py).
Without the lock it reads the old row and commits a step for a lease that is gone."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection
from django.utils import timezone

from durableruns.engine import store
from durableruns.engine.errors import LeaseLost
from durableruns.engine.runs import start_run
from durableruns.models import Run, Step
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _outcome() -> store.StepOutcome:
    now = timezone.now()
    return store.StepOutcome(0, "0-x", "compute", "x", "", "", None, 1, None, 1, now, now)


def _in_thread(work: Callable[[], object]) -> tuple[threading.Thread, dict[str, object]]:
    """Run `work` on its own database connection; its result or exception lands in the dict."""
    done: dict[str, object] = {}

    def target() -> None:
        try:
            done["result"] = work()
        except BaseException as exc:  # LeaseLost is one, so agent code cannot swallow it
            done["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, done


def _waiting_on_a_lock(sql_start: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            [sql_start + "%"],
        )
        return cursor.fetchone()[0] > 0


def test_a_step_commit_racing_a_takeover_waits_and_then_sees_the_new_fence(rung):
    start_run("t-sleepy", {}, run_id="race")
    slow = store.acquire_lease("race", "slow:1:a")
    Run.objects.filter(pk="race").update(lease_expires_at=timezone.now())  # the TTL ran out

    taken, commit_takeover = threading.Event(), threading.Event()

    def take_over() -> bool:
        from django.db import transaction

        with transaction.atomic():  # the takeover's UPDATE, not yet committed
            assert store.acquire_lease("race", "next:1:b") is not None
            taken.set()
            commit_takeover.wait(30)
        return True

    takeover, _ = _in_thread(take_over)
    assert taken.wait(30)
    commit, committed = _in_thread(lambda: store.commit_step(slow, _outcome()))
    wait_for(
        lambda: committed or _waiting_on_a_lock("INSERT INTO durableruns_step"),
        timeout=10,
        message="the slow executor's step commit to finish or wait for the takeover",
    )
    commit_takeover.set()
    takeover.join(30)
    commit.join(30)

    assert isinstance(committed.get("error"), LeaseLost), committed
    assert not Step.objects.filter(run_id="race").exists()
    assert Run.objects.get(pk="race").lease_owner == "next:1:b"
