"""The runs list's filters, read from the query string and applied to a queryset.

One definition serves the list, its live status poll and the bulk actions, so
"cancel all matching" acts on exactly what the operator filtered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Upper
from django.http import QueryDict
from django.utils.http import urlencode

from ..engine.runs import RUN_ID_PATTERN
from ..models import Effect, Run
from ..validation import InvalidInput
from ..validation import moment as valid_moment

FIELDS = ("status", "agent", "version", "since", "until", "q", "error", "input", "parent")
MAX_TEXT = 255
MAX_INPUT = 1000


class FilterError(ValueError):
    """A filter value the list refuses outright (answered with a 400)."""


def moment(text: str) -> datetime | None:
    """A datetime-local value ("2026-11-29T09:20"), read as UTC when it has no offset;
    None (shown as an invalid filter) when it is no date or out of range."""
    try:
        return valid_moment(text, "date") if text.strip() else None
    except InvalidInput:
        return None


@dataclass
class RunFilters:
    status: str = ""
    agent: str = ""
    version: str = ""
    since: str = ""
    until: str = ""
    q: str = ""
    error: str = ""
    input: str = ""
    parent: str = ""  # a run id: list its child runs (engine/children.py)
    _ids: list[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_query(cls, query: QueryDict) -> RunFilters:
        """Raises FilterError for a NUL, an over-long value or an input that is not a
        JSON object: a search that silently ignored them would show the wrong runs."""
        values = {name: query.get(name, "").strip() for name in FIELDS}
        for name, value in values.items():
            limit = MAX_INPUT if name == "input" else MAX_TEXT
            if "\x00" in value:
                raise FilterError(f"the {name} filter contains a NUL character")
            if len(value) > limit:
                raise FilterError(f"the {name} filter is longer than {limit} characters")
        if values["status"] not in Run.Status.values:
            values["status"] = ""
        if values["input"]:
            _input_object(values["input"])
        if values["parent"] and not RUN_ID_PATTERN.match(values["parent"]):
            raise FilterError(
                "the parent filter must be a run id (1-64 letters, digits, '.', '_' or '-')"
            )
        return cls(**values)

    @classmethod
    def typed(cls, query: QueryDict) -> RunFilters:
        """The filters as typed, unchecked: only to give them back in the form when they
        are refused (never applied: `from_query` is the only way to a usable filter)."""
        values = {name: query.get(name, "").replace("\x00", "\ufffd") for name in FIELDS}
        return cls(**{name: value[:MAX_INPUT].strip() for name, value in values.items()})

    def check_for_action(self) -> None:
        """Raises FilterError when a filter would be left out of `apply` (an unreadable
        date): a list may ignore it with a warning, an action must not act on more."""
        if self.invalid():
            raise FilterError(f"unreadable date in: {', '.join(self.invalid())}")

    def apply(self, queryset: QuerySet[Run], *, with_status: bool = True) -> QuerySet[Run]:
        if with_status and self.status:
            queryset = queryset.filter(status=self.status)
        if self.agent:
            queryset = queryset.filter(agent=self.agent)
        if self.version:
            queryset = queryset.filter(agent_version=self.version)
        if since := moment(self.since):
            queryset = queryset.filter(created_at__gte=since)
        if until := moment(self.until):
            queryset = queryset.filter(created_at__lt=until)
        if self.q:
            queryset = queryset.filter(Q(pk__in=self._searched_ids()) | Q(pk__startswith=self.q))
        if self.error:
            # Upper(...) LIKE matches the trigram index run_error_message (0003_operators).
            queryset = queryset.alias(error_text=Upper(KT("error__message"))).filter(
                error_text__contains=self.error.upper()
            )
        if self.input:
            queryset = _input_contains(queryset, _input_object(self.input))
        if self.parent:
            queryset = queryset.filter(parent_run_id=self.parent)
        return queryset

    def _searched_ids(self) -> list[str]:
        """A run id, or an idempotency key: a ledger key, or any key (it starts with the run
        id). Resolved to ids once, so the page and the counts both use the primary key."""
        if self._ids is None:
            by_effect = Effect.objects.filter(idempotency_key=self.q).values_list(
                "run_id", flat=True
            )
            self._ids = sorted({self.q, self.q.split(":", 1)[0], *by_effect})
        return self._ids

    def searches(self) -> bool:
        """Whether a filter the status index cannot serve is set (see views._status_counts)."""
        return bool(self.q or self.error or self.input)

    def invalid(self) -> list[str]:
        return [
            name
            for name in ("since", "until")
            if getattr(self, name) and moment(getattr(self, name)) is None
        ]

    def describe(self) -> str:
        """The filter in words, for a confirmation that must say what it acts on."""
        words = {
            "status": "status is {}",
            "agent": "agent is {}",
            "version": "version is {}",
            "since": "created from {} (UTC)",
            "until": "created before {} (UTC)",
            "q": "run id starts with, or idempotency key is, {}",
            "error": "error contains {}",
            "input": "input contains {}",
            "parent": "child run of {}",
        }
        parts = [words[name].format(_shown(name, value)) for name, value in self.items()]
        return "; ".join(parts) if parts else "no filter: every run"

    def items(self) -> list[tuple[str, str]]:
        return [(name, getattr(self, name)) for name in FIELDS if getattr(self, name)]

    def query(self, **overrides: str) -> str:
        """The query string of these filters, e.g. for the status counts' links."""
        values = dict(self.items())
        values.update(overrides)
        return urlencode({k: v for k, v in values.items() if v})


def _shown(name: str, value: str) -> str:
    """A filter value as a person reads it: a status by its label ("awaiting approval"),
    anything typed quoted as typed."""
    if name == "status" and value in Run.Status.values:
        return str(Run.Status(value).label).lower()
    return repr(value)


def _input_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise FilterError("the input filter is not valid JSON") from None
    if not isinstance(value, dict) or not value:
        raise FilterError('the input filter must be a JSON object, e.g. {"order_id": "A-1001"}')
    return value


def _input_contains(queryset: QuerySet[Run], wanted: dict[str, Any]) -> QuerySet[Run]:
    """Runs whose input contains `wanted`: JSON containment on Postgres (GIN-indexed);
    elsewhere (SQLite, the demo) each top-level key must equal its value."""
    if connection.vendor == "postgresql":
        return queryset.filter(input__contains=wanted)
    for key, value in wanted.items():
        queryset = queryset.filter(**{f"input__{key}": value})
    return queryset
