"""Property-based tests for key derivation (invariant 3): a key depends on the run,
the step, the tool and the arguments' JSON value, and on nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from durableruns.engine import store
from durableruns.engine.errors import SerializationError
from durableruns.engine.keys import MAX_DEPTH, canonical_json, fingerprint, idempotency_key
from tests.conftest import ROOT

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=30,
)
arguments = st.dictionaries(st.text(min_size=1, max_size=20), json_values, max_size=6)


def _reordered(value: Any) -> Any:
    """The same value with every dict built in reverse insertion order."""
    if isinstance(value, dict):
        return {key: _reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(item) for item in value]
    return value


def _key(args: dict[str, Any]) -> str:
    return idempotency_key("run-1", "2-refund", "refund", args)


# --- Equal arguments, equal keys -------------------------------------------------


@given(arguments)
def test_it_gives_equal_keys_whatever_the_dict_insertion_order(args):
    assert _key(_reordered(args)) == _key(args)


_KEYS_IN_A_CHILD = """
import json, sys
from durableruns.engine.keys import idempotency_key
calls = json.load(sys.stdin)
print(json.dumps([idempotency_key("run-1", "2-refund", "refund", args) for args in calls]))
"""


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(arguments, min_size=1, max_size=25))
def test_it_gives_equal_keys_in_another_process(calls):
    # The child reads every dict in reverse insertion order and hashes with another seed.
    child = subprocess.run(
        [sys.executable, "-c", _KEYS_IN_A_CHILD],
        input=json.dumps([_reordered(args) for args in calls]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        check=True,
    )
    assert json.loads(child.stdout) == [_key(args) for args in calls]


@given(arguments)
def test_it_treats_tuples_as_lists(args):
    as_tuples = {
        key: tuple(value) if isinstance(value, list) else value for key, value in args.items()
    }
    assert _key(as_tuples) == _key(args)


# --- Different arguments, different keys -----------------------------------------------


@settings(max_examples=60)
@given(arguments, arguments)
def test_it_gives_different_keys_for_different_arguments(first, second):
    assume(canonical_json(first) != canonical_json(second))
    assert _key(first) != _key(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (1, 1.0),
        (1, True),
        (0, False),
        (1, "1"),
        (None, "null"),
        ([], {}),
        ("", None),
        ([1, 2], [2, 1]),
        ("é", "e\u0301"),
    ],
)
def test_it_gives_different_keys_for_values_json_tells_apart(first, second):
    assert _key({"value": first}) != _key({"value": second})


@given(arguments, st.sampled_from(["run-2", "run-10"]), st.sampled_from(["3-refund", "2-email"]))
def test_it_gives_different_keys_for_another_run_or_step(args, run_id, step_id):
    assert idempotency_key(run_id, "2-refund", "refund", args) != _key(args)
    assert idempotency_key("run-1", step_id, "refund", args) != _key(args)


# --- Floats, unicode, nesting and size ---------------------------------------------------


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_it_keys_every_finite_float_by_its_exact_value(number):
    assert json.loads(canonical_json(number)) == number
    assert _key({"cents": number}) == _key({"cents": json.loads(canonical_json(number))})


@given(st.text())
def test_it_keys_unicode_arguments_with_an_ascii_key(text):
    key = _key({"body": text})
    assert key.isascii()
    assert key.startswith("run-1:2-refund:refund:") and len(key.rsplit(":", 1)[1]) == 16


def test_it_keys_a_large_argument_without_growing_the_key():
    big = {"body": "x" * 5_000_000, "rows": list(range(100_000))}
    assert len(_key(big)) == len(_key({}))
    assert _key(big) != _key({**big, "body": big["body"] + "y"})


@given(st.integers(min_value=-(10**4000), max_value=10**4000))
def test_it_keys_big_integers(number):
    assert _key({"n": number}) != _key({"n": number + 1})


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_it_accepts_nesting_up_to_the_limit():
    assert fingerprint(_nested(MAX_DEPTH))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 50_000])
def test_it_rejects_deeper_nesting_with_a_clear_error(depth):
    with pytest.raises(SerializationError, match=f"nested more than {MAX_DEPTH} levels"):
        fingerprint(_nested(depth))
    with pytest.raises(SerializationError, match="nested more than"):
        store.encode(_nested(depth))


def test_it_rejects_a_cycle_with_a_clear_error():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(SerializationError, match="nested more than"):
        fingerprint(cycle)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "nan is not a finite number"),
        ({"a": [1, {"b": float("inf")}]}, "inf is not a finite number"),
        ([float("-inf")], "-inf is not a finite number"),
        ({1: "a"}, "dict key 1 is not a string"),
        ({"a": {(1, 2): "b"}}, r"dict key \(1, 2\) is not a string"),
        ({None: "a"}, "dict key None is not a string"),
        ({"a": {1, 2}}, "Object of type set is not JSON serializable"),
        ({"a": object()}, "Object of type object is not JSON serializable"),
        ({"a": b"bytes"}, "Object of type bytes is not JSON serializable"),
        ({"a": Decimal("1.10")}, "Object of type Decimal is not JSON serializable"),
        ({"a": "\ud800"}, "lone surrogate"),
        ({"n": 10**5000}, "integer string conversion"),
    ],
)
def test_it_rejects_what_json_cannot_carry_with_a_clear_error(value, message):
    with pytest.raises(SerializationError, match=message):
        fingerprint(value)
    with pytest.raises(SerializationError, match=message):
        canonical_json(value)


@given(st.sampled_from([float("nan"), float("inf"), float("-inf")]), arguments)
def test_it_rejects_non_finite_floats_anywhere(number, args):
    with pytest.raises(SerializationError, match="not a finite number"):
        _key({**args, "deep": [{"x": number}]})


@pytest.mark.django_db
def test_it_rejects_a_payload_over_the_limit_before_storing_it(settings):
    settings.DURABLERUNS_MAX_PAYLOAD_BYTES = 1000
    assert store.encode({"body": "x" * 900})
    with pytest.raises(SerializationError, match=r"over the 1000-byte limit"):
        store.encode({"body": "x" * 1000})
    with pytest.raises(SerializationError, match=r"over the 1000-byte limit"):
        store.encode({"body": "é" * 600})  # the limit counts UTF-8 bytes, not characters


@pytest.mark.django_db
def test_it_rejects_a_nul_character_postgres_cannot_store():
    assert _key({"body": "a\x00b"})  # keys are fine: only storage refuses NUL
    with pytest.raises(SerializationError, match="NUL"):
        store.encode({"body": "a\x00b"})
    assert store.encode({"body": "\\u0000"}) == '{"body":"\\\\u0000"}'
