"""What a redaction rule would match in recent runs, shown to an admin before saving it.

It reads the values as they are stored for display (already redacted by today's
rules), so what it lists is what the new rule would hide *in addition*. The key
test mirrors the engine's (a key equal to the rule, or ending in `_<rule>`); the
engine remains the one that redacts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..engine.redaction import compile_pattern
from ..models import RedactionRule, Run, Step

RECENT_RUNS = 50
STEPS_SCANNED = 2000
MATCHES_SHOWN = 20
TEXT_SCANNED = 10_000  # characters of one value scanned
EXCERPT = 20  # characters shown either side of a match, and of a long match's ends
DEPTH = 20


@dataclass(frozen=True)
class Match:
    run_id: str
    where: str  # "input", "result", "step 3 (refund) result"
    path: str  # "customer.email"
    excerpt: str


@dataclass(frozen=True)
class RulePreview:
    runs_scanned: int
    runs_matched: int
    matches: list[Match]


def preview_rule(kind: str, value: str) -> RulePreview:
    """Matches of a candidate rule in the most recent runs (inputs, results, steps)."""
    test = _key_test(value) if kind == RedactionRule.Kind.KEY else _pattern_test(value)
    runs = list(Run.objects.order_by("-created_at").values("id", "input", "result")[:RECENT_RUNS])
    steps = Step.objects.filter(run_id__in=[r["id"] for r in runs]).order_by("run_id", "position")
    found: list[Match] = []
    matched: set[str] = set()
    sources = [(r["id"], "input", r["input"]) for r in runs]
    sources += [(r["id"], "result", r["result"]) for r in runs]
    for step in steps.values("run_id", "position", "name", "input", "result")[:STEPS_SCANNED]:
        label = f"step {step['position']} ({step['name']})"
        sources.append((step["run_id"], f"{label} input", step["input"]))
        sources.append((step["run_id"], f"{label} result", step["result"]))
    for run_id, where, stored in sources:
        for path, excerpt in _walk(stored, "", test, 0):
            matched.add(run_id)
            if len(found) < MATCHES_SHOWN:
                found.append(Match(run_id, where, path or "(whole value)", excerpt))
    return RulePreview(len(runs), len(matched), found)


def _key_test(rule: str) -> Any:
    wanted = rule.lower().replace("-", "_")

    def key_matches(key: str, _text: str | None) -> str | None:
        name = key.lower().replace("-", "_")
        return "(the whole value)" if name == wanted or name.endswith("_" + wanted) else None

    return ("key", key_matches)


def _pattern_test(rule: str) -> Any:
    # The engine's compiler, so the preview matches what saving the rule would hide, in
    # linear time (Python's re would backtrack on e.g. (a+)+$).
    pattern = compile_pattern(rule)

    def text_matches(_key: str, text: str | None) -> str | None:
        if text is None:
            return None
        hit = pattern.search(text[:TEXT_SCANNED])
        if hit is None:
            return None
        start, end = max(hit.start() - EXCERPT, 0), hit.end() + EXCERPT
        if end - start > 6 * EXCERPT:
            return f"{text[start : start + 3 * EXCERPT]}…{text[end - 3 * EXCERPT : end]}"
        return text[start:end]

    return ("pattern", text_matches)


def _walk(value: Any, path: str, test: Any, depth: int) -> Iterator[tuple[str, str]]:
    kind, check = test
    if depth > DEPTH:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if kind == "key" and (hit := check(str(key), None)):
                yield here, hit
                continue
            yield from _walk(item, here, test, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]", test, depth + 1)
    elif isinstance(value, str) and kind == "pattern" and (hit := check("", value)):
        yield path, hit
