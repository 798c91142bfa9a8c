"""Removes secrets from anything before it is stored (invariant 10).

Two kinds of rule: key names (a dict entry whose normalised key equals a listed
name or ends with `_<name>` is replaced whole) and value patterns (bearer tokens,
API-key-shaped strings, card numbers that pass the Luhn check). Applied by the
store to inputs, arguments, results and errors, and by the log filter.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

REDACTED = "[REDACTED]"

VALUE_PATTERNS = [
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*"),
    re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
]
CARD_CANDIDATE = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")


def redact(value: Any) -> Any:
    """A copy of `value` with secret-looking keys and values replaced."""
    keys = _key_rules()
    return _redact(value, keys)


def redact_text(text: str) -> str:
    for pattern in VALUE_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return CARD_CANDIDATE.sub(_mask_card, text)


def _key_rules() -> frozenset[str]:
    return frozenset(k.lower() for k in settings.DURABLERUNS_REDACT_KEYS)


def _is_secret_key(key: str, rules: frozenset[str]) -> bool:
    normalised = key.lower().replace("-", "_")
    return normalised in rules or any(normalised.endswith("_" + rule) for rule in rules)


def _redact(value: Any, rules: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and _is_secret_key(k, rules) else _redact(v, rules)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact(item, rules) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


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
