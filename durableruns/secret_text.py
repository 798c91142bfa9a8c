"""Finds secrets in values and text (invariant 10), in time linear in the input.

A leaf: it imports nothing from durableruns, so the logs (the lowest floor) and the
engine (`engine/redaction.py` is its name there) both use it without an arrow upward.

Two kinds of rule: key names (a dict entry whose normalised key equals a listed
name or ends with `_<name>` is replaced whole, camelCase keys included; in free
text, `name=value`, `name: "several words"` and `Authorization: Basic x` lose the
value) and value patterns (tokens of well-known shapes, PEM private keys, JWTs,
passwords in URLs, card numbers passing the Luhn check, as text or as JSON
numbers). The settings' rules (`DURABLERUNS_REDACT_KEYS`) always apply; admins add
more as RedactionRule rows, cached per process for a moment and dropped from the
cache whenever a rule changes.

Every pattern runs on RE2 (google-re2), which matches in time linear in the text
whatever the pattern, so neither our patterns nor an admin's can backtrack: a
100,000-character adversarial string costs milliseconds, not minutes, and never
starves the lease heartbeat. Patterns RE2 cannot run (backreferences, lookaround)
are refused as rules.

What this module produces is a *view*: what people, pages, logs and exports see.
Values that agent code may replay are stored as that view plus the originals,
encrypted (engine/vault.py): redaction never changes what agent code receives.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import re2
from django.apps import apps
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

REDACTED = "[REDACTED]"
# The default of DURABLERUNS_REDACT_KEYS; also what applies where no settings exist yet
# (gunicorn's master logs before any worker loads Django).
BUILT_IN_KEYS = (
    "password,passwd,passphrase,secret,api_key,apikey,token,access_token,refresh_token,"
    "authorization,auth,cookie,card_number,cvv,private_key,secret_key,secret_access_key,"
    "client_secret,pwd,credentials,credential,ssh_key,account_key,access_key"
)

_TOKEN = r"[A-Za-z0-9\-._~+/]"  # noqa: S105 - a character class, not a password
# Shapes whose whole match is a secret: the token formats of detect-secrets' plugins
# and gitleaks' rules (written for RE2: no lookaround), plus this product's own tokens.
VALUE_PATTERNS: list[str] = [
    rf"(?i)\b(?:bearer|basic|digest)\s+{_TOKEN}{{8,}}=*",
    r"dr_[0-9a-f]{12}_[A-Za-z0-9_-]{43}",  # this product's API tokens (services/tokens.py)
    r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}",
    r"\bsk-[A-Za-z0-9_\-]{16,}",
    r"\b(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-[A-Za-z0-9_\-]{20,}",
    r"\bGR1348941[A-Za-z0-9_\-]{20,}",
    r"\bxox[abposre]-[A-Za-z0-9-]{10,}",
    r"(?i)\bxapp-\d-[A-Z0-9]+-\d+-[A-Z0-9]+",
    r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+",
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\bnpm_[A-Za-z0-9]{36}",
    r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
    r"\b(?:AC|SK)[a-z0-9]{32}\b",  # Twilio account SIDs and API keys
    r"\bpypi-AgE[A-Za-z0-9_\-]{70,}",
    r"\b[0-9a-f]{32}-us[0-9]{1,2}\b",  # Mailchimp
    r"\b\d{8,10}:[0-9A-Za-z_-]{35}\b",  # Telegram bots
    r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?s:.*?)"
    r"(?:-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\z)",
]
# Shapes known by what precedes them: group 1 is kept, the rest is the secret. An AWS
# secret key and a classic (unprefixed) GitHub token are 40 characters that only their
# context tells from a digest; an Azure connection string's AccountKey ends at `;`.
CONTEXT_PATTERNS: list[str] = [
    r"(?i)(aws.{0,20}?(?:key|secret|pwd|pw|password|pass|token).{0,20}?[\s'\"=:]\s*)"
    r"[0-9a-zA-Z/+]{40}\b",
    r"(?i)(github.{0,20}?[\s'\"=:]\s*)[0-9a-f]{40}\b",
    r"(?i)(AccountKey=)[a-zA-Z0-9+/=]{20,}",
]
# A bare AWS secret key (40 base64 characters) is told from a digest by the access key
# id beside it: within 100 characters after or before one, a run of exactly 40 is the
# secret (the credentials CSV, `id:secret`, prose). Only the two are redacted, the words
# between are kept. They run before VALUE_PATTERNS, which redact the id itself.
_AWS_ID = r"\b(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}\b"
_B64 = "[0-9A-Za-z/+]"
_NOT_B64 = "[^0-9A-Za-z/+=]"
AWS_PAIR_PATTERNS: list[tuple[str, bytes]] = [
    (
        rf"(?s)({_AWS_ID}(?:.{{0,100}}?{_NOT_B64})?){_B64}{{40}}({_NOT_B64}|\z)",
        rb"\1" + REDACTED.encode() + rb"\2",
    ),
    (
        rf"(?s)(\A|{_NOT_B64}){_B64}{{40}}((?:{_NOT_B64}.{{0,100}}?)?{_AWS_ID})",
        rb"\1" + REDACTED.encode() + rb"\2",
    ),
]
# The password of scheme://user:password@host keeps everything but the password, which
# may hold any character but space and quotes (`/` and `@` included: up to the last @).
URL_PASSWORD = r"\b([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"'<>]*:)[^\s\"'<>]+@"  # noqa: S105
# Digits grouped by a space, two spaces, a dash or a dot (at most 57 characters).
CARD_CANDIDATE = r"\b(?:\d[ .\-]{0,2}){12,18}\d\b"

# Rules change rarely and are read on every write: a process keeps them this long,
# and a change clears the shared cache so other processes reload within this time.
LOCAL_TTL_SECONDS = 2.0
# The key names the entry's format: processes of two versions share Redis during a
# rolling deploy, and the version before this one answered 500 on every write it
# redacted when it read this version's entry under its key (a list there, a dict here).
CACHE_KEY = "durableruns:redaction-rules:v2"
GENERATION_KEY = "durableruns:redaction-rules:v2:generation"
_KEY_CACHE_LIMIT = 10_000

log = logging.getLogger(__name__)
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20  # room for many admin patterns in one alternation
_OPTIONS.log_errors = False  # a refused pattern is reported to the admin, not to stderr


class InvalidPattern(ValueError):
    """A pattern RE2 cannot run (it would need backtracking) or that does not parse."""


def compile_pattern(source: str) -> Any:
    """An admin's pattern as RE2 runs it on text; InvalidPattern if it cannot."""
    try:
        return re2.compile(source, _OPTIONS)
    except re2.error as exc:
        raise InvalidPattern(f"RE2 cannot run this pattern ({_reason(exc)}).") from None


def _reason(exc: Exception) -> str:
    """google-re2 raises its message as bytes: say it in words, not as a bytes repr."""
    reason = exc.args[0] if exc.args else ""
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    return str(reason) or "it does not parse"


def _compile_bytes(source: str) -> Any:
    return compile_pattern(source.encode())  # type: ignore[arg-type]


@dataclass
class Rules:
    keys: frozenset[str]
    patterns: tuple[Any, ...]  # RE2 patterns whose whole match is a secret
    key_text: list[tuple[Any, bytes]]  # `name=value` and the like: (pattern, replacement)
    any_hit: Any  # one alternation of everything: the fast "nothing to redact" test
    _key_verdicts: dict[str, bool] = field(default_factory=dict)

    screen_safe: bool = True  # False when an admin pattern is anchored (see flags())

    def flags(self, json_text: str) -> bool:
        """Whether anything in a value might be redacted, from its canonical JSON alone.

        One linear scan instead of a walk with a scan per string. Sound because the
        scanned text holds every key, string and number of the value: JSON escapes
        are decoded first (a pattern sees the same characters as in the string), a
        dict key appears as `"name":` (which the key-text patterns catch, camelCase
        and `_suffix` forms included), and card numbers as digit runs. An admin
        pattern anchored with ^ or $ could match a string alone but not inside the
        document, so such a rule makes every value take the walk.
        """
        if not self.screen_safe:
            return True
        if "\\" in json_text:
            json_text = _JSON_ESCAPE.sub(_unescape, json_text)
        return self.any_hit.search(json_text.encode("utf-8", "surrogatepass")) is not None

    def is_secret_key(self, key: str) -> bool:
        verdict = self._key_verdicts.get(key)
        if verdict is None:
            normalised = _normalise_key(key)
            verdict = any(normalised.endswith(rule) for rule in self.keys)
            if len(self._key_verdicts) < _KEY_CACHE_LIMIT:
                self._key_verdicts[key] = verdict
        return verdict


_local: dict[str, Any] = {"rules": None, "loaded": 0.0, "reloading": False}
_lock = threading.Lock()
_loading = threading.local()


def redact(value: Any) -> Any:
    """`value` with secret-looking keys and values replaced (the value itself if none)."""
    return redact_with(value, current_rules())


def redact_with(value: Any, rules: Rules) -> Any:
    """As redact(), with these rules; returns the very same object when nothing matched,
    so a caller can tell "nothing secret here" without comparing."""
    if isinstance(value, str):
        return _redact_text(value, rules)
    if isinstance(value, dict):
        return _redact_dict(value, rules)
    if isinstance(value, list | tuple):
        return _redact_list(value, rules)
    if isinstance(value, int) and not isinstance(value, bool) and _is_card_number(value):
        return REDACTED
    return value


def redact_text(text: str) -> str:
    return _redact_text(text, current_rules())


def matches(kind: str, rule: str, value: Any) -> list[str]:
    """What one rule (kind "key" or "pattern") would redact in `value`: the matched
    texts of a pattern, the values (as JSON text) under a matching key. For previews."""
    import json

    found: list[str] = []
    if kind == "key":
        only = Rules(frozenset({_normalise_key(rule)}), (), [], re2.compile(b"$^"))

        def collect(key: str, under: Any) -> None:
            if only.is_secret_key(key):
                found.append(json.dumps(under))

        _walk_pairs(value, collect)
        return found
    pattern = compile_pattern(rule)
    _walk_strings(value, lambda text: found.extend(m.group() for m in pattern.finditer(text)))
    return found


def current_rules() -> Rules:
    """Settings rules plus the admins' rules, cached (see LOCAL_TTL_SECONDS). One thread
    of a process reloads them when they are due; the others keep the copy they have
    until it is done: with hundreds of runs in flight, every thread fetched them at once
    (each through a Redis client of its own) every LOCAL_TTL_SECONDS."""
    with _lock:
        rules = _local["rules"]
        if rules is not None and (
            time.monotonic() - _local["loaded"] < LOCAL_TTL_SECONDS or _local["reloading"]
        ):
            return rules
        _local["reloading"] = True
    try:
        return _load_rules()
    finally:
        with _lock:
            _local["reloading"] = False


def _load_rules() -> Rules:
    if getattr(_loading, "active", False) or not apps.ready:
        # A log record emitted while loading (the filter redacts logs), or a process
        # that has not set Django up (gunicorn's master): no database, settings' rules.
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
    """Called when a RedactionRule is saved or deleted (and again once that commits):
    forget this process's copy and move the shared copy's generation on.

    A generation, not a delete: another process may have read the rules just before
    the change committed and share that older copy just after it was announced. Its
    copy carries the generation it read first, which is then no longer current, so
    nobody takes it (a delete would have let it stand for the copy's minute)."""
    with _lock:
        _local["rules"] = None
    try:
        cache.add(GENERATION_KEY, 0, timeout=None)
        cache.incr(GENERATION_KEY)
    except Exception:
        # The rule is saved in Postgres; other processes see it when their copy expires.
        log.warning("redaction rules: the shared copy could not be retired", exc_info=True)


def _admin_rules() -> list[tuple[str, str]] | None:
    generation, stored = _shared_copy()
    if stored is not None:
        return stored
    try:
        # Looked up, not imported: this module sits below every other one (logs use it).
        rules = apps.get_model("durableruns", "RedactionRule")
        stored = list(rules.objects.values_list("kind", "value"))
    except Exception:
        # No table before `migrate`, a broken transaction, no database access allowed
        # here (async code, a unit test): the settings' rules still apply, and the
        # admins' rules are loaded again on the next call.
        log.warning("redaction rules unavailable; using the settings' rules only")
        return None
    if generation is not None:
        with contextlib.suppress(Exception):  # Redis is only a cache: Postgres answered
            cache.set(CACHE_KEY, {"generation": generation, "rules": stored}, timeout=60)
    return stored


def _shared_copy() -> tuple[int | None, list[tuple[str, str]] | None]:
    """(the current generation, the admins' rules another process shared at it), read
    in one round trip. The rules are None when Redis does not answer (generation None
    too: nothing is shared then), when the copy is of an older generation, or when
    the key holds something else (another version, another application sharing the
    database): then Postgres is asked, as after an expiry."""
    try:
        found = cache.get_many([GENERATION_KEY, CACHE_KEY])
    except Exception:
        log.warning("redaction rules: Redis unavailable, reading them from the database")
        return None, None
    generation, copy = found.get(GENERATION_KEY, 0), found.get(CACHE_KEY)
    if not isinstance(copy, dict) or copy.get("generation") != generation:
        return generation, None
    stored = copy.get("rules")
    if not isinstance(stored, list) or not all(_is_rule(pair) for pair in stored):
        return generation, None
    return generation, [(kind, value) for kind, value in stored]


def _is_rule(pair: object) -> bool:
    return (
        isinstance(pair, list | tuple)
        and len(pair) == 2
        and all(isinstance(part, str) for part in pair)
    )


def _build_rules(admin: list[tuple[str, str]]) -> Rules:
    return _compiled_rules(_setting_keys(), tuple(map(tuple, admin)))


def _setting_keys() -> tuple[str, ...]:
    try:
        return tuple(settings.DURABLERUNS_REDACT_KEYS)
    except ImproperlyConfigured:  # no DJANGO_SETTINGS_MODULE in this process (yet)
        return tuple(BUILT_IN_KEYS.split(","))


@functools.lru_cache(maxsize=8)
def _compiled_rules(setting_keys: tuple[str, ...], admin: tuple[tuple[str, str], ...]) -> Rules:
    keys = {_normalise_key(k) for k in setting_keys}
    sources = [*VALUE_PATTERNS, URL_PASSWORD, CARD_CANDIDATE]
    patterns = [_compile_bytes(p) for p in VALUE_PATTERNS]
    for kind, value in admin:
        if kind == "key":
            keys.add(_normalise_key(value))
            continue
        try:
            patterns.append(_compile_bytes(value))
            sources.append(value)
        except InvalidPattern:
            log.warning("skipping redaction pattern %r: RE2 cannot run it", value)
    key_text = _context_patterns() + _key_text_patterns(keys)
    sources.extend(pattern.pattern.decode() for pattern, _ in key_text)
    sources.extend(_key_screen(keys))
    any_hit = _compile_bytes("|".join(f"(?:{s})" for s in sources))
    anchored = any(_ANCHOR.search(value) for kind, value in admin if kind != "key")
    return Rules(frozenset(keys), tuple(patterns), key_text, any_hit, screen_safe=not anchored)


_ANCHOR = re.compile(r"\^|\$|\\A|\\z|\\Z|\(\?[a-zA-Z]*m")
_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    return _ESCAPES[code] if len(code) == 1 else chr(int(code[1:], 16))


def _normalise_key(key: str) -> str:
    """`accessToken`, `Access-Token`, `ACCESS_TOKEN` and `accesstoken` all become
    `accesstoken`: a key is secret when its normalised form ends with a rule's
    (`DBPassword`, `adminpassword`, `db-password`)."""
    return key.lower().replace("_", "").replace("-", "")


def _name_pattern(keys: set[str]) -> str:
    """Every rule's name in text, in any case, with `_` or `-` anywhere inside it: the
    text form of what _normalise_key folds together, so the screen stays sound."""
    spelled = ("[_-]*".join(re.escape(char) for char in key) for key in keys)
    return "|".join(sorted(spelled, key=len, reverse=True))


@functools.lru_cache(maxsize=1)
def _context_patterns() -> list[tuple[Any, bytes]]:
    return [(_compile_bytes(source), rb"\1" + _REDACTED) for source in CONTEXT_PATTERNS]


def _key_screen(keys: set[str]) -> list[str]:
    """What the screen must also flag: a bare `name:` (whatever follows) and a
    `{"name": "Authorization", "value": ...}` pair (see _pair_value_key)."""
    if not keys:
        return []
    names = _name_pattern(keys)
    return [
        rf"(?i)(?:{names})['\"]?\s*[=:]",
        rf'(?i)"(?:{"|".join(_PAIR_NAMES)})"\s*:\s*"[^"]*(?:{names})"',
    ]


def _key_text_patterns(keys: set[str]) -> list[tuple[Any, bytes]]:
    """`password=hunter2`, `"api_key": "x\\ny"`, `Authorization: Basic abc`,
    `password: two words` and `the password is two words` in free text (`accessToken=`,
    `DBPassword:` too: a name is found wherever it ends a word). After `=` the value is
    one word (a query string's `&` ends it); after `:` or `is`, the rest of the line."""
    if not keys:
        return []
    names = _name_pattern(keys)
    said = _name_pattern({key for key in keys if "pass" in key or "pwd" in key})
    rest_of_line = r"[^\s'\",;&}<>][^\n'\",;&}<>]*"
    sources = [
        # quoted, escaped quotes and line breaks included
        (rf"""((?:{names})['"]?\s*[=:]\s*)"(?:[^"\\]|\\(?s:.))*\"""", b'"' + _REDACTED + b'"'),
        (rf"""((?:{names})['"]?\s*[=:]\s*)'(?:[^'\\]|\\(?s:.))*'""", b"'" + _REDACTED + b"'"),
        (
            rf"((?:{names})['\"]?\s*=\s*)(?:(?:basic|bearer|digest|token)\s+)?[^\s'\",;&}}]+",
            _REDACTED,
        ),
        (rf"((?:{names})['\"]?\s*:\s*){rest_of_line}", _REDACTED),
    ]
    if said:
        sources.append((rf"((?:{said})\s+(?:is|was)\s*:?\s+){rest_of_line}", _REDACTED))
    return [
        (_compile_bytes("(?i)" + source), rb"\1" + replacement) for source, replacement in sources
    ]


# `{"name": "Authorization", "value": "Bearer x"}`: HTTP headers, form fields and
# environment variables as name/value pairs lose the value when the name is secret.
_PAIR_NAMES = ("name", "key")
_PAIR_VALUES = ("value",)


def _pair_value_key(value: dict, rules: Rules) -> str | None:
    for name in _PAIR_NAMES:
        named = value.get(name)
        if isinstance(named, str) and rules.is_secret_key(named):
            return next((key for key in _PAIR_VALUES if key in value), None)
    return None


def _redact_dict(value: dict, rules: Rules) -> dict:
    changed: dict[Any, Any] | None = None
    pair_value = _pair_value_key(value, rules)
    for key, item in value.items():
        if isinstance(key, str) and (key == pair_value or rules.is_secret_key(key)):
            new = REDACTED
        else:
            new = redact_with(item, rules)
        if new is not item and changed is None:
            changed = {}
        if changed is not None:
            changed[key] = new
    if changed is None:
        return value
    return {k: changed.get(k, v) for k, v in value.items()}


def _redact_list(value: list | tuple, rules: Rules) -> Any:
    redacted = [redact_with(item, rules) for item in value]
    if all(new is old for new, old in zip(redacted, value, strict=True)):
        return value
    return redacted


def _redact_text(text: str, rules: Rules) -> str:
    """Runs on the UTF-8 bytes: google-re2 converts offsets on every match of a str,
    which made a match cost ~20 us instead of ~2."""
    if not text:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if not rules.any_hit.search(data):
        return text  # the common case: one linear scan, no copy
    for pattern, replacement in _AWS_PAIRS:
        data = pattern.sub(replacement, data)
    for pattern in rules.patterns:
        data = pattern.sub(_REDACTED, data)
    data = _URL_PASSWORD.sub(rb"\1" + _REDACTED + b"@", data)
    for pattern, replacement in rules.key_text:
        data = pattern.sub(replacement, data)
    data = _CARD.sub(_mask_card, data)
    redacted = data.decode("utf-8", "surrogatepass")
    return text if redacted == text else redacted


_REDACTED = REDACTED.encode()
_URL_PASSWORD = re2.compile(URL_PASSWORD.encode(), _OPTIONS)
_AWS_PAIRS = [(re2.compile(p.encode(), _OPTIONS), r) for p, r in AWS_PAIR_PATTERNS]
# Python's engine here, on purpose: the candidate has no unbounded repetition (at most
# 37 characters from any start), so it is linear too, and the Luhn check needs a
# callback per candidate, which costs less in `re` than through google-re2's wrapper.
_CARD = re.compile(CARD_CANDIDATE.encode())


def _mask_card(match: re.Match[bytes]) -> bytes:
    found = match.group()
    return _REDACTED if _luhn_ok(_CARD_SEPARATORS.sub(b"", found).decode()) else found


_CARD_SEPARATORS = re.compile(rb"[ .\-]")


def _is_card_number(number: int) -> bool:
    return 10**12 <= number < 10**19 and _luhn_ok(str(number))


_DOUBLED = {str(d): (d * 2 - 9 if d > 4 else d * 2) for d in range(10)}


def _luhn_ok(digits: str) -> bool:
    total = sum(map(int, digits[-1::-2])) + sum(map(_DOUBLED.__getitem__, digits[-2::-2]))
    return total % 10 == 0


def _walk_strings(value: Any, visit: Callable[[str], Any]) -> None:
    if isinstance(value, str):
        visit(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            visit(str(key))
            _walk_strings(item, visit)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk_strings(item, visit)


def _walk_pairs(value: Any, visit: Callable[[str, Any], Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            visit(str(key), item)
            _walk_pairs(item, visit)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk_pairs(item, visit)
