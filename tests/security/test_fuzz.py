"""Hostile input to every URL in the resolver, as every role: never a 5xx, never slow,
and nothing written by a request that was refused.

The URL list and the role matrix are test_url_matrix's (so a new URL is fuzzed as soon
as it has a row there). Each URL gets:
- hostile text (NUL, lone surrogates, 10 KB, "a-"*4000, ...) in every query
  parameter, path segment and form field, and in every field of a JSON body, as
  every role;
- hostile typed values (extreme and impossible dates, forged keyset and DRF
  cursors, bad base64, out-of-range numbers) one parameter at a time, as the admin,
  who gets past every permission check and so reaches the most parsing code;
- for POST: 100k-deep JSON, NaN/Infinity, wrong content types and broken bodies.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from durableruns.models import (
    Approval,
    AuditEvent,
    Effect,
    RedactionRule,
    RetentionPolicy,
    Run,
    SavedView,
    Step,
)
from tests.security.test_url_matrix import EXPECTED, KNOWN, ROLES, _client, objects  # noqa: F401

pytestmark = pytest.mark.django_db

SLOW = 1.0  # seconds; any answer slower than this fails, on a quiet machine
FLOOR_RATIO = 40  # ... or slower than this many times a cheap page, measured in the same test
PAGE_RATIO = 10  # ... and, timed again, this many times the same page without the input

DEEP = "[" * 100_000 + "]" * 100_000
TEXT = [
    "\x00",
    "run\x00id",
    "\ud800",
    "a\udfffb",
    "x" * 10_240,
    "a-" * 4000,
    "%00",
    "../../../etc/passwd",
    "' OR 1=1 --",
    "<script>alert(1)</script>",
    "😀" * 100,
]


def _b64(text: str, *, urlsafe: bool = False) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    return (base64.urlsafe_b64encode(raw) if urlsafe else base64.b64encode(raw)).decode()


DATES = [
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59.999999",
    "2026-02-30T00:00",
    "2026-01-01T25:61",
    "99999-01-01",
    "1e308",
    "-1",
]
CURSORS = [
    "!!not-base64!!",
    "=",
    "²",
    *[
        _b64(text, urlsafe=urlsafe)
        for urlsafe in (True, False)
        for text in (
            "\x00|r1",
            "9999-12-31T23:59:59-23:59|r1",
            "notadate|r1",
            "2026-01-01T00:00:00+00:00|\x00",
            "²",
            "-5",
            "9" * 40,
            "p=notadate",
            "p=abc",
            "p=1e5",
            "p=\x00",
            "p=9999-12-31T23:59:59-23:59",
            "o=99999999999&p=1",
            "r=1&o=-1&p=²",
        )
    ],
    base64.b64encode(b"\xff\xfe\x00").decode(),
]
NUMBERS = ["-1", "99999999999999999999999999", "1e5", "²", "0x10", "NaN", "9" * 5000]
TYPED = {
    "since": DATES,
    "until": DATES,
    "cursor": CURSORS,
    "limit": NUMBERS,
    "position": NUMBERS,
    "run": TEXT[:2] + NUMBERS,
    "status": ["nope", "²"],
    "state": ["nope", "²"],
}
PARAMS = [
    *TYPED,
    *("q", "agent", "version", "tool", "key", "kind", "idempotency_key", "sandbox", "next"),
]
FORM_FIELDS = [
    *("decision", "comment", "payload", "resolution", "note", "result", "name", "agent"),
    *("statuses", "age_days", "action", "enabled", "kind", "value", "position", "sandbox"),
    *("run", "confirm", "dry_run", "next", "username", "password", "status", "q"),
    "query",  # a saved view's filters (web/saved_views.py)
]
FORM_TYPED = {
    "age_days": ["999999", "9" * 30, "-1", "1e5"],
    "position": NUMBERS,
    "result": [DEEP[:50_000] + DEEP[-50_000:], "NaN", "1e400", '{"a": "\\u0000"}'],
    "payload": [DEEP[:50_000] + DEEP[-50_000:], "NaN", '{"a": "\\ud800"}'],
    "decision": ["\ud800", "approve\x00"],
    "resolution": ["\ud800", "happened\x00"],
}
JSON_FIELDS = [
    *("agent", "input", "run_id", "agent_version", "position", "sandbox"),
    *("decision", "comment", "payload", "resolution", "result", "note"),
]
RAW_BODIES = [
    ("application/json", DEEP.encode()),
    ("application/json", b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("application/json", b'{"input": NaN, "agent": "refund-bot"}'),
    ("application/json", b'{"input": 1e400, "agent": "refund-bot"}'),
    ("application/json", b'{"agent": "refund-bot", "input": {"k": "\\ud800"}}'),
    ("application/json", b'{"agent": "refund-bot", "input": {"k": "\\u0000"}}'),
    ("application/json", b'{"decision": "\\udfff", "resolution": "\\ud800"}'),
    ("application/json", b"\xff\xfe{not json"),
    ("application/json", b"null"),
    ("application/json", b"[]"),
    ("application/json", b'"just a string"'),
    ("application/json", b'{"input": ' + b"9" * 5000 + b"}"),
    ("text/plain", b'{"agent": "refund-bot", "input": {}}'),
    ("application/xml", b"<run/>"),
    ("multipart/form-data; boundary=x", b"--x\r\nbroken"),
    ("application/x-www-form-urlencoded", b"decision=%ED%A0%80&comment=%00"),
    ("application/json; charset=utf-16", '{"agent": "x"}'.encode("utf-16")),
]


def _qs(params: dict[str, str]) -> str:
    """A query string as a hostile client would send it: lone surrogates as their bytes."""
    return "&".join(
        f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
        for k, v in params.items()
    )


def _form(fields: dict[str, str]) -> bytes:
    return _qs(fields).encode()


def _path(name: str, ids: dict[str, int], hostile: dict[str, str] | None = None) -> str:
    """The URL with its real arguments, or with `hostile` ones spliced in raw."""
    kwargs = {k: ids.get(v, v) for k, v in EXPECTED[name].kwargs.items()}
    placeholders = {k: f"HOSTILE{i}" for i, k in enumerate(hostile or {})}
    for key, mark in placeholders.items():
        kwargs[key] = 1234567 if isinstance(kwargs[key], int) else mark
    url = reverse(name, kwargs=kwargs)
    for key, mark in placeholders.items():
        raw = quote(hostile[key].encode("utf-8", "surrogatepass"), safe="")
        url = url.replace(str(1234567) if isinstance(kwargs[key], int) else mark, raw)
    return url


SNAPSHOT_MODELS = (
    Run,
    Step,
    Effect,
    Approval,
    AuditEvent,
    RetentionPolicy,
    RedactionRule,
    SavedView,
)


def _snapshot() -> list[Any]:
    """Every row of the tables a request could write, to compare before and after.

    On Postgres the server digests each table in one query (row text in primary-key
    order), which keeps the thousands of POSTs here cheap; elsewhere the rows
    themselves are compared."""
    if connection.vendor != "postgresql":
        return [list(m.objects.order_by("pk").values()) for m in SNAPSHOT_MODELS]
    with connection.cursor() as cursor:
        cursor.execute(_SNAPSHOT_SQL)
        return list(cursor.fetchone())


# One statement, one round trip, for all the tables: a POST here is two snapshots.
# Table and column names come from the models, never from input.
_SNAPSHOT_SQL = "SELECT " + ", ".join(  # noqa: S608
    f"(SELECT count(*) || ':' || md5(coalesce(string_agg(t::text, '|' ORDER BY t.{pk}), ''))"  # noqa: S608
    f" FROM {table} t)"
    for table, pk in ((m._meta.db_table, m._meta.pk.column) for m in SNAPSHOT_MODELS)
)


def _timed(client: Client, method: str, path: str, request: Any) -> float:
    started = time.perf_counter()
    client.generic(method, path, **request)
    return time.perf_counter() - started


def _floor(client: Client) -> float:
    """The median time of a cheap page (every middleware, a session, one template) on this
    machine now: a quadratic parser on 8 KB of input is seconds against its milliseconds,
    while a machine loaded by other work slows both alike."""
    times = []
    for _ in range(7):
        started = time.perf_counter()
        client.get(reverse("login"))
        times.append(time.perf_counter() - started)
    return sorted(times)[3]


class Fuzzer:
    def __init__(self, ids: dict[str, int], django_user_model: Any) -> None:
        self.ids = ids
        self.clients = {r: _client(r, django_user_model) for r in ROLES}
        for client in self.clients.values():
            client.raise_request_exception = False
        self.failures: list[str] = []
        self.sent = 0
        self.slow = max(SLOW, FLOOR_RATIO * _floor(self.clients["admin"]))

    def send(self, role: str, method: str, path: str, **request: Any) -> None:
        client: Client = self.clients[role]
        before = _snapshot() if method == "POST" else None
        started = time.perf_counter()
        response = client.generic(method, path, **request)
        elapsed = time.perf_counter() - started
        self.sent += 1
        what = f"{role} {method} {path[:120]!r} {str(request)[:160]}"
        if response.status_code >= 500:
            self.failures.append(f"{response.status_code} for {what}")
        if elapsed > self.slow and self._slow_again(client, method, path, request):
            self.failures.append(f"{elapsed:.2f}s for {what}")
        if before is not None and 400 <= response.status_code < 500 and _snapshot() != before:
            self.failures.append(f"refused ({response.status_code}) but wrote rows: {what}")
        json_type = "json" in response.get("Content-Type", "")
        if path.startswith("/api/") and 400 <= response.status_code < 500 and not json_type:
            self.failures.append(f"non-JSON {response.status_code} from the API: {what}")

    def _slow_again(self, client: Client, method: str, path: str, request: Any) -> bool:
        """A slow parser is slow every time, and slower than the same page without the
        hostile input; a machine busy for a while (CI's other workers killing clusters)
        slows both alike. The request was refused or read-only (else the row check below
        fails it anyway). Both are timed now, beside each other."""
        if method != "GET":
            return _timed(client, method, path, request) > self.slow
        # Interleaved, three of each, medians: a burst of load slows one answer, not
        # the median of three beside the same page's.
        plain_path = path.split("?", 1)[0]
        hostile, plain = [], []
        for _ in range(3):
            hostile.append(_timed(client, method, path, request))
            plain.append(_timed(client, "GET", plain_path, {}))
        again, baseline = sorted(hostile)[1], sorted(plain)[1]
        return again > max(self.slow, PAGE_RATIO * baseline)

    def get(self, role: str, path: str, params: dict[str, str]) -> None:
        self.send(role, "GET", f"{path}?{_qs(params)}" if params else path)

    def post_form(self, role: str, path: str, fields: dict[str, str]) -> None:
        self.send(
            role,
            "POST",
            path,
            data=_form(fields),
            content_type="application/x-www-form-urlencoded",
        )

    def post_raw(self, role: str, path: str, content_type: str, body: bytes) -> None:
        self.send(role, "POST", path, data=body, content_type=content_type)


@pytest.fixture
def fuzzer(objects, django_user_model, settings):  # noqa: F811
    settings.DURABLERUNS_METRICS_TOKEN = "a-metrics-token-for-tests"
    return Fuzzer(objects, django_user_model)


def _fuzz_get(fuzzer: Fuzzer, name: str, path: str) -> None:
    for role in ROLES:
        for value in TEXT:
            fuzzer.get(role, path, dict.fromkeys(PARAMS, value))
    for param, values in TYPED.items():
        for value in values:
            fuzzer.get("admin", path, {param: value})


def _fuzz_post(fuzzer: Fuzzer, name: str, path: str) -> None:
    api = path.startswith("/api/")
    for role in ROLES:
        for value in TEXT:
            if api:
                body = json.dumps(dict.fromkeys(JSON_FIELDS, value)).encode()
                fuzzer.post_raw(role, path, "application/json", body)
            else:
                fuzzer.post_form(role, path, dict.fromkeys(FORM_FIELDS, value))
        for content_type, body in RAW_BODIES:
            fuzzer.post_raw(role, path, content_type, body)
    for field, values in FORM_TYPED.items():
        for value in values:
            if api:
                body = json.dumps({field: value}).encode()
                fuzzer.post_raw("admin", path, "application/json", body)
            else:
                fuzzer.post_form("admin", path, {field: value, "confirm": "save"})


@pytest.mark.parametrize("name", KNOWN)
def test_hostile_input_never_gets_a_server_error(name, fuzzer):
    path = _path(name, fuzzer.ids)
    if EXPECTED[name].method == "GET":
        _fuzz_get(fuzzer, name, path)
    else:
        _fuzz_post(fuzzer, name, path)
    for key in EXPECTED[name].kwargs:
        for value in [*TEXT, "9" * 30, "0"]:
            hostile = _path(name, fuzzer.ids, {key: value})
            for role in ROLES:
                fuzzer.send(role, EXPECTED[name].method, hostile)
    assert not fuzzer.failures, "\n".join(fuzzer.failures[:40])
    assert fuzzer.sent > 50


def test_hostile_cookies_and_headers_get_a_4xx(fuzzer):
    for value in ("\x00", "a" * 10_240):
        client = Client(raise_request_exception=False)
        client.cookies["sessionid"] = value
        assert client.get(reverse("runs")).status_code in {302, 400}
        for header in (f"Token {value}", f"Bearer {value}", "Token", "Token a b"):
            response = client.get(reverse("api-runs"), HTTP_AUTHORIZATION=header)
            assert 400 <= response.status_code < 500, header
        response = client.get(reverse("metrics"), HTTP_AUTHORIZATION=f"Bearer {value}")
        assert 400 <= response.status_code < 500


def test_a_valid_run_input_of_hostile_text_is_stored_within_a_second(fuzzer):
    body = json.dumps({"agent": "refund-bot", "input": {"note": "a-" * 4000}}).encode()
    before = set(Run.objects.values_list("pk", flat=True))
    fuzzer.post_raw("admin", reverse("api-runs"), "application/json", body)
    assert not fuzzer.failures, fuzzer.failures
    (stored,) = Run.objects.exclude(pk__in=before)  # accepted, and stored as sent
    assert stored.input == {"note": "a-" * 4000}


@pytest.mark.parametrize("model", SNAPSHOT_MODELS, ids=lambda m: m.__name__)
def test_the_written_rows_check_sees_a_change_to_any_table_it_covers(model, objects):  # noqa: F811
    """The fuzzer's "refused but wrote rows" check reads every table in one statement:
    a change to any one row of any of them changes it."""
    before = _snapshot()
    if model is AuditEvent:  # append-only: a new row is its only change
        AuditEvent.objects.create(action="test.written", target_type="run", target_id="r")
        assert _snapshot() != before
        return
    row = model.objects.order_by("pk").first()
    assert row is not None, f"the fixture has no {model.__name__}"
    field = next(
        f for f in model._meta.concrete_fields
        if f.get_internal_type() in {"TextField", "CharField"} and not f.primary_key
        and not f.choices and not f.unique and not f.is_relation
    )  # fmt: skip
    model.objects.filter(pk=row.pk).update(**{field.attname: "changed by the test"})
    assert _snapshot() != before
