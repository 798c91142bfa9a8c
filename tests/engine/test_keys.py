"""Property-based tests for key derivation (invariant 3): a key depends on the run,
the step, the tool and the arguments' JSON value, and on nothing else."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import hashlib
import json
import math
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from durableruns.engine import keys, store
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


# --- The fast serialiser writes exactly the reference's text, or steps aside ------------

hostile_text = st.text(
    st.characters(codec="utf-8")
    | st.sampled_from(["\x00", "\x1f", "\x7f", "\u2028", "\u2029", "\ufeff", '"', "\\", "/"])
)
hostile_floats = st.floats(allow_nan=False, allow_infinity=False) | st.builds(
    lambda mantissa, exponent: float(f"{mantissa}e{exponent}"),
    st.integers(min_value=1, max_value=10**17),
    st.integers(min_value=-330, max_value=300),
).filter(math.isfinite)
hostile_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | hostile_floats
    | hostile_text
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(hostile_text, children, max_size=5)
    ),
    max_leaves=40,
)


def _reference_or_error(value: Any) -> tuple[str, Any]:
    try:
        text = keys._reference_json(value)
    except SerializationError as exc:
        return "error", str(exc)
    return text, json.loads(text, parse_float=store._as_jsonb_reads)


def _ours_or_error(value: Any) -> tuple[str, Any]:
    try:
        text = canonical_json(value)
        return text, store.normalise(value)
    except SerializationError as exc:
        return "error", str(exc)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_values)
def test_the_fast_path_writes_the_reference_text_and_value(value):
    expected_text, expected_value = _reference_or_error(value)
    text, normal = _ours_or_error(value)
    assert text == expected_text
    # Same value, same types, same key order.
    assert repr(normal) == repr(expected_value)
    if text != "error":
        assert fingerprint(value) == hashlib.sha256(text.encode()).hexdigest()[:16]


class _Colour(enum.Enum):
    RED = "red"


class _Size(enum.IntEnum):
    BIG = 3


class _Text(str):
    pass


@dataclasses.dataclass
class _Point:
    x: int = 1


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        [1.0, float("inf")],
        {"a": float("-inf")},
        1e-5,
        -2.5e-5,
        1e-7,
        1e16,
        1.5e300,
        [0.0001, 0.00001],
        2**63,
        2**64 - 1,
        2**64,
        -(2**63) - 1,
        10**30,
        "\ud800",
        {"\udfff": 1},
        {1: 2},
        {None: 2},
        (1, 2),
        {"t": (1, [2, (3,)])},
        uuid.UUID(int=1),
        _Colour.RED,
        _Size.BIG,
        _Text("x"),
        {_Text("k"): 1},
        collections.OrderedDict(b=1, a=2),
        _Point(),
        datetime.date(2026, 1, 1),
        orjson.Fragment(b"[1]"),
        b"x",
        {"e": "1e-5 and 2e+16 and 0.00001 in text"},
        "\x00\x7f\u2028",
    ],
)
def test_the_fast_path_gives_the_reference_answer_for_hostile_values(value):
    assert _ours_or_error(value)[0] == _reference_or_error(value)[0]


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 254, 255, 300])
@pytest.mark.parametrize("inner", ["list", "dict"])
def test_the_fast_path_holds_the_depth_limit(depth, inner):
    value: Any = 1
    for _ in range(depth):
        value = [value] if inner == "list" else {"k": value}
    assert _ours_or_error(value) == _reference_or_error(value)
    if depth <= MAX_DEPTH:
        assert keys._fast(value) is not None  # and it took the fast path


def test_the_fast_path_serves_ordinary_values():
    value = {"items": [{"id": "A-1", "cents": 1250, "ok": True, "note": "é ✓", "x": None}]}
    assert keys._fast(value) is not None
    parsed = store.normalise(value)
    assert parsed == value and parsed is not value  # a fresh copy for the caller
    assert parsed["items"][0] is not value["items"][0]
