"""The engine's name for redaction, which lives in the leaf `durableruns.secret_text`
(the logs use it too, and must not import the engine)."""

from __future__ import annotations

from ..secret_text import (
    REDACTED,
    VALUE_PATTERNS,
    InvalidPattern,
    Rules,
    compile_pattern,
    current_rules,
    matches,
    redact,
    redact_text,
    redact_with,
    rules_changed,
)

__all__ = [
    "REDACTED",
    "VALUE_PATTERNS",
    "InvalidPattern",
    "Rules",
    "compile_pattern",
    "current_rules",
    "matches",
    "redact",
    "redact_text",
    "redact_with",
    "rules_changed",
]
