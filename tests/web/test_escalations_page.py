"""The escalation queue: unknown outcomes oldest first, with what an operator needs to
decide, and the three resolutions as forms; a bad result is refused with a clear error."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from durableruns.models import AuditEvent, Effect, Run
from tests.web import agents
from tests.web.dashboard import make_effect, make_run, rung_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db
URL = reverse("escalations")


@pytest.fixture
def escalated() -> Effect:
    run = make_run("stuck", status=Run.Status.ESCALATED)
    return make_effect(
        run,
        2,
        tool="refund_unsafe",
        tool_kind="unsafe_write",
        state=Effect.State.UNKNOWN,
        args={"order_id": "A-1001", "cents": 4200},
        error={"type": "AmbiguousOutcome", "message": "ReadTimeout: no answer from provider"},
    )


def _resolve(client, effect: Effect, **data):
    return client.post(reverse("escalation-resolve", args=[effect.pk]), data)


def _effect(effect: Effect) -> Effect:
    return Effect.objects.get(pk=effect.pk)


def test_it_redirects_anonymous_users_to_log_in(client, escalated):
    assert client.get(URL).status_code == 302
    assert _resolve(client, escalated, resolution="not_happened").status_code == 302
    assert _effect(escalated).state == Effect.State.UNKNOWN


def test_it_refuses_a_user_without_a_role(client, dave):
    client.force_login(dave)
    assert client.get(URL).status_code == 403


def test_it_lists_unknown_outcomes_oldest_first(client, bob):
    run = make_run("r", status=Run.Status.ESCALATED)
    now = timezone.now()
    make_effect(run, 5, state="unknown", started_at=now, key="newer-key")
    make_effect(run, 3, state="unknown", started_at=now - timedelta(hours=1), key="older-key")
    make_effect(run, 1, state="succeeded", key="settled-key")
    client.force_login(bob)
    body = client.get(URL).content.decode()
    keys = re.findall(r'<dt>Idempotency key</dt><dd><code class="full-id">([^<]+)</code>', body)
    assert keys == ["older-key", "newer-key"]


def test_it_shows_what_the_operator_needs_to_decide(client, bob, escalated):
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert "<code>refund_unsafe</code> in run" in body
    assert escalated.idempotency_key in body
    assert "&quot;cents&quot;: 4200" in body
    assert "ReadTimeout: no answer from provider" in body
    assert "The tool answered with an ambiguous error (it may have acted)" in body
    assert "Not asked: this tool has no reconcile (lookup) hook." in body
    assert "This tool has no lookup: check the provider with the key yourself" in body


def test_it_shows_why_a_reconcile_hook_did_not_settle_it(client, bob):
    run = make_run("r", status=Run.Status.ESCALATED)
    make_effect(
        run,
        2,
        tool="refund_with_lookup",
        tool_kind="unsafe_write",
        state="unknown",
        error={"message": "reconcile failed: provider answered 503"},
    )
    client.force_login(bob)
    assert "Asked, and it failed: provider answered 503" in client.get(URL).content.decode()


def test_it_shows_the_queue_but_no_buttons_to_a_reviewer(client, alice, escalated):
    client.force_login(alice)
    body = client.get(URL).content.decode()
    assert escalated.idempotency_key in body
    assert "It happened" not in body and "<form" not in body.split("<main>")[1]


def test_a_reviewer_cannot_resolve(client, alice, escalated):
    client.force_login(alice)
    assert _resolve(client, escalated, resolution="not_happened").status_code == 403
    assert _effect(escalated).state == Effect.State.UNKNOWN


def test_it_records_that_it_happened_with_the_given_result(
    client, bob, escalated, rung, django_capture_on_commit_callbacks
):
    client.force_login(bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = _resolve(
            client,
            escalated,
            resolution="happened",
            result='{"refund_id": "rf_manual"}',
            note="seen in the dashboard",
        )
    assert response.status_code == 302 and response["Location"] == URL
    effect = _effect(escalated)
    assert (effect.state, effect.resolution, effect.result) == (
        "resolved",
        "happened",
        {"refund_id": "rf_manual"},
    )
    assert effect.resolved_by == bob and effect.note == "seen in the dashboard"
    assert Run.objects.get(pk="stuck").status == Run.Status.QUEUED
    assert rung == ["stuck"]
    assert AuditEvent.objects.filter(action="effect.resolve", actor_name="bob").count() == 1


def test_it_refuses_a_result_that_is_not_json_and_keeps_what_was_typed(client, bob, escalated):
    client.force_login(bob)
    response = _resolve(client, escalated, resolution="happened", result="{refund_id: rf_1}")
    body = response.content.decode()
    assert response.status_code == 400
    assert 'role="alert">The result is not valid JSON' in body
    assert ">{refund_id: rf_1}</textarea>" in body
    assert _effect(escalated).state == Effect.State.UNKNOWN
    assert Run.objects.get(pk="stuck").status == Run.Status.ESCALATED


def test_it_refuses_it_happened_without_a_result(client, bob, escalated):
    client.force_login(bob)
    response = _resolve(client, escalated, resolution="happened", result="  ")
    assert response.status_code == 400
    assert "needs the result the call returned" in response.content.decode()
    assert _effect(escalated).state == Effect.State.UNKNOWN


def test_it_records_that_it_did_not_happen_so_the_call_is_made_again(client, bob, escalated):
    client.force_login(bob)
    told = client.get(_resolve(client, escalated, resolution="not_happened")["Location"])
    effect = _effect(escalated)
    assert (effect.state, effect.resolution) == ("resolved", "not_happened")
    assert Run.objects.get(pk="stuck").status == Run.Status.QUEUED
    said = f"Resolved {effect.idempotency_key}: it had not happened; run stuck goes on."
    assert said in told.content.decode()


def test_aborting_asks_for_confirmation_first(client, bob, escalated):
    client.force_login(bob)
    response = _resolve(client, escalated, resolution="aborted", note="no way to tell")
    body = response.content.decode()
    assert response.status_code == 200 and "The run is <strong>cancelled</strong>" in body
    assert 'name="confirmed" value="yes"' in body and 'value="no way to tell"' in body
    assert _effect(escalated).state == Effect.State.UNKNOWN
    assert Run.objects.get(pk="stuck").status == Run.Status.ESCALATED


def test_an_admin_aborts_the_run_and_is_told_it_was_cancelled(client, carol, escalated):
    client.force_login(carol)
    response = client.post(
        reverse("escalation-resolve", args=[escalated.pk]),
        {"resolution": "aborted", "confirmed": "yes"},
        follow=True,
    )
    assert _effect(escalated).resolution == "aborted"
    assert Run.objects.get(pk="stuck").status == Run.Status.CANCELLED
    body = response.content.decode()
    assert "run stuck was cancelled" in body and "goes on" not in body


def test_it_says_the_ledger_cannot_tell_a_crash_before_from_after_the_call(client, bob):
    run = make_run("crashed", status=Run.Status.ESCALATED)
    make_effect(
        run,
        1,
        tool="refund_unsafe",
        tool_kind="unsafe_write",
        state="unknown",
        error={"message": "the call was started but its outcome was never recorded"},
    )
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert "before, during or after the call. The ledger cannot tell which" in body
    assert "before the tool was called" in body


def test_it_asks_the_provider_through_the_tools_lookup(client, bob):
    run = make_run("looked-up", status=Run.Status.ESCALATED)
    effect = make_effect(
        run,
        1,
        tool="t-charge",
        tool_kind="unsafe_write",
        state="unknown",
        args={"cents": 500},
        error={"message": "reconcile failed: provider answered 503"},
    )
    agents.CHARGES[effect.idempotency_key] = {"charge_id": "ch_1"}
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert "Ask the provider now" in body
    answer = client.get(
        reverse("escalation-lookup", args=[effect.pk]), headers={"HX-Request": "true"}
    )
    assert "Found at the provider:" in answer.content.decode()
    assert "ch_1" in answer.content.decode()
    del agents.CHARGES[effect.idempotency_key]
    answer = client.get(
        reverse("escalation-lookup", args=[effect.pk]), headers={"HX-Request": "true"}
    )
    assert "Not found at the provider." in answer.content.decode()
    assert _effect(effect).state == Effect.State.UNKNOWN  # asking changes nothing


def test_a_reviewer_cannot_ask_the_provider(client, alice, escalated):
    client.force_login(alice)
    assert client.get(reverse("escalation-lookup", args=[escalated.pk])).status_code == 403


def test_it_refuses_an_unknown_resolution(client, bob, escalated):
    client.force_login(bob)
    response = _resolve(client, escalated, resolution="maybe")
    assert response.status_code == 400
    assert "unknown resolution" in response.content.decode()


def test_it_refuses_a_different_answer_after_someone_resolved_it(client, bob, carol, escalated):
    client.force_login(carol)
    _resolve(client, escalated, resolution="not_happened")
    client.force_login(bob)  # bob's page was loaded before carol answered
    response = _resolve(client, escalated, resolution="happened", result="{}")
    assert response.status_code == 400
    assert "already resolved as &#x27;not_happened&#x27; by carol" in response.content.decode()
    assert _effect(escalated).resolution == "not_happened"


def test_it_escapes_arguments_and_errors(client, bob):
    run = make_run("r", status=Run.Status.ESCALATED)
    make_effect(
        run,
        2,
        state="unknown",
        args={"note": "<b>bold</b>"},
        error={"message": "<script>x()</script>"},
    )
    client.force_login(bob)
    body = client.get(URL).content.decode()
    assert "<b>bold</b>" not in body and "<script>x()" not in body


@pytest.mark.parametrize("rows", [5, 50])
def test_it_uses_a_constant_number_of_queries(client, bob, django_assert_num_queries, rows):
    run = make_run("many", status=Run.Status.ESCALATED)
    for position in range(rows):
        make_effect(run, position, state="unknown")
    client.force_login(bob)
    # session, user, permissions (own and the roles', one query), unknown effects
    with django_assert_num_queries(4):
        response = client.get(URL)
    assert response.content.decode().count('<article class="escalation"') == rows
