"""The runs list's filters, read from the query string and applied to a queryset.

One definition serves the list, its live status poll and the bulk actions, so
"cancel all matching" acts on exactly what the operator filtered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import QuerySet
from django.http import QueryDict
from django.utils.http import urlencode

from ..models import Effect, Run
from ..validation import InvalidInput, moment

FIELDS = ("status", "agent", "version", "since", "until", "q")


def _moment(text: str) -> datetime | None:
    """A datetime-local value ("2026-11-29T09:20"), read as UTC when it has no offset;
    None (shown as an invalid filter) when it is no date or out of range."""
    try:
        return moment(text, "date") if text.strip() else None
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
    _ids: list[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_query(cls, query: QueryDict) -> RunFilters:
        values = {name: query.get(name, "").strip()[:255] for name in FIELDS}
        if values["status"] not in Run.Status.values:
            values["status"] = ""
        return cls(**values)

    def apply(self, queryset: QuerySet[Run], *, with_status: bool = True) -> QuerySet[Run]:
        if with_status and self.status:
            queryset = queryset.filter(status=self.status)
        if self.agent:
            queryset = queryset.filter(agent=self.agent)
        if self.version:
            queryset = queryset.filter(agent_version=self.version)
        if since := _moment(self.since):
            queryset = queryset.filter(created_at__gte=since)
        if until := _moment(self.until):
            queryset = queryset.filter(created_at__lt=until)
        if self.q:
            queryset = queryset.filter(pk__in=self._searched_ids())
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

    def invalid(self) -> list[str]:
        return [
            name
            for name in ("since", "until")
            if getattr(self, name) and _moment(getattr(self, name)) is None
        ]

    def items(self) -> list[tuple[str, str]]:
        return [(name, getattr(self, name)) for name in FIELDS if getattr(self, name)]

    def query(self, **overrides: str) -> str:
        """The query string of these filters, e.g. for the status counts' links."""
        values = dict(self.items())
        values.update(overrides)
        return urlencode({k: v for k, v in values.items() if v})
