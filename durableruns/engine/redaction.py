"""Removes secrets from anything before it is stored (invariant 10).

Two kinds of rule: key names (a dict entry whose normalised key equals a listed
name or ends with `_<name>` is replaced whole; in free text, `name=value` and
`name: value` lose the value) and value patterns (bearer tokens, API-key-shaped
strings, card numbers that pass the Luhn check). The settings' rules
(`DURABLERUNS_REDACT_KEYS`) always apply; admins add more as RedactionRule rows,
which are cached per process for a moment and dropped from the cache whenever a
rule changes. Applied by the store to inputs, arguments, results and errors
(tracebacks included), by the audit log, and by the logging filter.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache

REDACTED = "[REDACTED]"

VALUE_PATTERNS = [
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*"),
    re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
]
CARD_CANDIDATE = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")

# Rules change rarely and are read on every write: a process keeps them this long,
# and a change clears the shared cache so other processes reload within this time.
LOCAL_TTL_SECONDS = 2.0
CACHE_KEY = "durableruns:redaction-rules"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rules:
    keys: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]
    key_text: re.Pattern[str] | None


_local: dict[str, Any] = {"rules": None, "loaded": 0.0}
_lock = threading.Lock()
_loading = threading.local()


def redact(value: Any) -> Any:
    """A copy of `value` with secret-looking keys and values replaced."""
    return _redact(value, current_rules())


def redact_text(text: str) -> str:
    return _redact_text(text, current_rules())


def current_rules() -> Rules:
    """Settings rules plus the admins' rules, cached (see LOCAL_TTL_SECONDS)."""
    with _lock:
        rules = _local["rules"]
        if rules is not None and time.monotonic() - _local["loaded"] < LOCAL_TTL_SECONDS:
            return rules
    if getattr(_loading, "active", False):
        # A log record emitted while loading (the filter redacts logs): settings' rules.
        return _build_rules([])
    _loading.active = True
    try:
        admin = _admin_rules()
    finally:
        _loading.active = False
    rules = _build_rules(admin or [])
    if admin is not None:  # a failed load is retried on the next call, not cached
        with _lock:
            _local["rules"], _local["loaded"] = rules, time.monotonic()
    return rules


def rules_changed() -> None:
    """Called when a RedactionRule is saved or deleted: forget every cached copy."""
    cache.delete(CACHE_KEY)
    with _lock:
        _local["rules"] = None


def _admin_rules() -> list[tuple[str, str]] | None:
    stored = cache.get(CACHE_KEY)
    if stored is not None:
        return stored
    from ..models import RedactionRule

    try:
        stored = list(RedactionRule.objects.values_list("kind", "value"))
    except Exception:
        # No table before `migrate`, a broken transaction, no database access allowed
        # here (async code, a unit test): the settings' rules still apply, and the
        # admins' rules are loaded again on the next call.
        log.warning("redaction rules unavailable; using the settings' rules only")
        return None
    cache.set(CACHE_KEY, stored, timeout=60)
    return stored


def _build_rules(admin: list[tuple[str, str]]) -> Rules:
    keys = {k.lower().replace("-", "_") for k in settings.DURABLERUNS_REDACT_KEYS}
    patterns = list(VALUE_PATTERNS)
    for kind, value in admin:
        if kind == "key":
            keys.add(value.lower().replace("-", "_"))
        else:
            try:
                patterns.append(re.compile(value))
            except re.error:
                log.warning("skipping invalid redaction pattern %r", value)
    return Rules(frozenset(keys), tuple(patterns), _key_text_pattern(keys))


def _key_text_pattern(keys: set[str]) -> re.Pattern[str] | None:
    """`password=hunter2`, `"api_key": "x"`, `token: abc` in free text (logs, messages)."""
    if not keys:
        return None
    names = "|".join(
        sorted((re.escape(k).replace("_", "[_-]?") for k in keys), key=len, reverse=True)
    )
    return re.compile(rf"(?i)(\b[\w-]*(?:{names})['\"]?\s*[=:]\s*)(['\"]?)([^\s'\",;&}}]+)")


def _is_secret_key(key: str, rules: frozenset[str]) -> bool:
    normalised = key.lower().replace("-", "_")
    return normalised in rules or any(normalised.endswith("_" + rule) for rule in rules)


def _redact(value: Any, rules: Rules) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and _is_secret_key(k, rules.keys)
            else _redact(v, rules)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, rules) for item in value]
    if isinstance(value, str):
        return _redact_text(value, rules)
    return value


def _redact_text(text: str, rules: Rules) -> str:
    for pattern in rules.patterns:
        text = pattern.sub(REDACTED, text)
    if rules.key_text is not None:
        text = rules.key_text.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return CARD_CANDIDATE.sub(_mask_card, text)


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    return REDACTED if _luhn_ok(digits) else match.group()


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        number = int(char)
        if index % 2:
            number = number * 2 - 9 if number > 4 else number * 2
        total += number
    return total % 10 == 0
