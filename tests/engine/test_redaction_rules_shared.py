"""The admins' redaction rules shared through Redis: a new rule is never hidden by an
older copy that another process read before the rule committed and cached after the
change was announced (it would have left secrets in clear for the copy's minute)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from durableruns import secret_text
from durableruns.models import RedactionRule

pytestmark = pytest.mark.django_db(transaction=True)


def _in_another_process() -> list[tuple[str, str]] | None:
    """What another process does when its copy expires: read the rules from Postgres
    (its own session: it cannot see an uncommitted rule) and share them in Redis."""
    result: list = []

    def load() -> None:
        try:
            result.append(secret_text._admin_rules())
        finally:
            connection.close()

    thread = threading.Thread(target=load)
    thread.start()
    thread.join(timeout=30)
    return result[0]


def _forget_local_copy() -> None:
    """As a process that has no copy of its own yet (a worker that just started)."""
    with secret_text._lock:
        secret_text._local["rules"] = None


def test_a_copy_read_before_a_new_rule_committed_does_not_hide_it():
    secret_text.rules_changed()
    with transaction.atomic():
        RedactionRule.objects.create(kind=RedactionRule.Kind.KEY, value="iban")
        # The save announced the change already; this process then read the old rules
        # and shared them after the announcement.
        assert _in_another_process() == []

    _forget_local_copy()
    assert "iban" in secret_text.current_rules().keys


def test_a_deleted_rule_is_not_brought_back_by_an_older_copy():
    rule = RedactionRule.objects.create(kind=RedactionRule.Kind.PATTERN, value="GB[0-9]{2}")
    secret_text.rules_changed()
    assert _in_another_process() == [("pattern", "GB[0-9]{2}")]
    with transaction.atomic():
        rule.delete()
        _in_another_process()  # still sees the rule: the delete has not committed

    _forget_local_copy()
    assert secret_text.redact_text("GB33") == "GB33"


def test_it_never_writes_the_key_the_previous_version_reads():
    """During a rolling deploy the previous version reads a bare list of pairs under
    `durableruns:redaction-rules`; this version's entry has another shape, so it goes
    under a key of its own (the previous version answered 500 on reading it)."""
    from django.core.cache import cache

    previous = [["key", "iban"]]
    cache.set("durableruns:redaction-rules", previous, timeout=60)
    RedactionRule.objects.create(kind=RedactionRule.Kind.KEY, value="token_id")
    _forget_local_copy()

    assert "tokenid" in secret_text.current_rules().keys
    assert cache.get("durableruns:redaction-rules") == previous
    assert cache.get(secret_text.CACHE_KEY)["rules"] == [("key", "token_id")]
