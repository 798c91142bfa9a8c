"""Invariant 2 against redaction: what a recorded step returns to agent code on
replay is exactly what it returned when it executed, whatever redaction rules
exist now or later. Rules change what people and logs see, never what agent code
receives (issue 11)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from durableruns.demo.models import ProviderCall
from durableruns.engine import redaction
from durableruns.engine.runs import start_run
from durableruns.models import Approval, RedactionRule, Run, Step
from durableruns.services import approvals
from tests.engine.agents import SEEN

pytestmark = [pytest.mark.django_db(transaction=True)]

EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+\.[A-Za-z0-9.]+"


def _rule(kind: str, value: str) -> None:
    RedactionRule.objects.create(kind=kind, value=value)
    redaction.rules_changed()


def _emails_sent(run_id: str) -> list[str]:
    rows = ProviderCall.objects.filter(
        provider="email", idempotency_key__startswith=f"{run_id}:"
    ).values_list("payload", flat=True)
    return [payload["to"] for payload in rows]


def test_it_emails_the_real_address_after_approval_under_an_email_rule(provider_url, drive, alice):
    _rule("pattern", EMAIL)
    run, _ = start_run("refund-bot", {"order_id": "A-1002"}, run_id="email-rule")
    assert drive(run.id).status == Run.Status.AWAITING_APPROVAL
    approval = Approval.objects.get(run_id=run.id)
    assert "grace@example.com" not in str(approval.payload)  # the reviewer sees it redacted
    approvals.decide(approval, "approve", user=alice)

    finished = drive(run.id)

    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert _emails_sent(run.id) == ["grace@example.com"]
    lookup = Step.objects.get(run_id=run.id, name="lookup_order")
    assert lookup.result["customer"] == redaction.REDACTED  # what pages and the API read


def test_a_key_rule_on_order_id_does_not_break_new_runs(provider_url, drive):
    _rule("key", "order_id")
    run, _ = start_run("refund-bot", {"order_id": "A-1001"}, run_id="order-id-rule")

    finished = drive(run.id)

    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert finished.result["refunded"] is True
    assert finished.input["order_id"] == redaction.REDACTED
    assert _emails_sent(run.id) == ["ada@example.com"]


def test_a_rule_added_after_execution_does_not_change_the_replay(drive):
    run, _ = start_run("t-echo-twice", {"value": {"note": "call 555-0100"}}, run_id="later")
    assert drive(run.id, max_tasks=1).status == Run.Status.WAITING
    _rule("pattern", r"555-\d{4}")
    finished = drive(run.id)
    assert finished.status == Run.Status.SUCCEEDED, finished.error
    assert SEEN[run.id] == [{"note": "call 555-0100"}] * 2


# --- The property: random JSON, random rules, replay returns exactly the value ----

_words = st.sampled_from(
    ["password", "token", "apiKey", "order_id", "x", "sk_live_abcdefgh12345678", "a-", "é"]
)
_text = st.one_of(st.text(max_size=30), _words, st.builds("".join, st.lists(_words, max_size=4)))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([4111111111111111, 5555555555554444]),  # card numbers as JSON numbers
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=12,
)
_rules = st.lists(
    st.one_of(
        st.tuples(st.just("key"), st.sampled_from(["password", "token", "order_id", "x", "é"])),
        st.tuples(st.just("pattern"), st.sampled_from([r"\d+", r"[a-z]{2}", "é", r"-", r"\w"])),
    ),
    max_size=3,
    unique=True,
)


def _storable(value: object) -> bool:
    # Not repr(): it writes NUL and lone surrogates as escapes, so it never held them.
    text = json.dumps(value, ensure_ascii=False)
    return "\\u0000" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@hsettings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=_json.filter(_storable), rules=_rules)
def test_replay_returns_exactly_the_executed_value(drive, value, rules):
    from durableruns.engine.store import normalise

    RedactionRule.objects.all().delete()
    for kind, rule in rules:
        RedactionRule.objects.create(kind=kind, value=rule)
    redaction.rules_changed()
    run_id = f"prop-{len(SEEN)}-{id(value)}"
    run, _ = start_run("t-echo-twice", {"value": value}, run_id=run_id)

    finished = drive(run.id)

    assert finished.status == Run.Status.SUCCEEDED, finished.error
    expected = normalise(value)
    assert SEEN[run.id] == [expected, expected]
