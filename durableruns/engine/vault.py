"""Secrets at rest (invariant 10): what redaction matched in a replayable value is
stored encrypted beside the redacted view, and only the executor decrypts it.

A row that holds replayable payloads (Run, Step, Effect, Approval) has a `secrets`
column: empty when redaction matched nothing, otherwise one Fernet token (AES-128-CBC
with HMAC-SHA256, from `cryptography`) whose plaintext is the canonical JSON of
`{field: original value}` for the fields whose view differs from the value. The
JSON columns keep the redacted view, which is all that pages, the API, exports'
readers, metrics and logs ever see.

Keys: `DURABLERUNS_ENCRYPTION_KEYS`, Fernet keys newest first (MultiFernet): the
first encrypts, all decrypt, so rotating is "prepend a new key, later drop the old
one once `manage.py rotatesecrets` has re-encrypted the rows". Without the setting a
key is derived from SECRET_KEY (demo and tests; settings refuse to start production
without it). Retention's "redact" empties the column: the secrets are shredded.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from .errors import SecretsUnavailable
from .keys import canonical_json


def seal(originals: dict[str, Any]) -> str:
    """One token holding these fields' original values (empty dict: no token)."""
    if not originals:
        return ""
    return _cipher().encrypt(canonical_json(originals).encode()).decode()


def unseal(token: str) -> dict[str, Any]:
    """The original values of a row's fields; SecretsUnavailable if no key opens them."""
    if not token:
        return {}
    try:
        return json.loads(_cipher().decrypt(token.encode()))
    except InvalidToken:
        raise SecretsUnavailable(
            "stored secrets cannot be decrypted with the configured keys "
            "(DURABLERUNS_ENCRYPTION_KEYS): add the key they were written with"
        ) from None


def reveal(row: Any, name: str) -> Any:
    """A row's field as agent code saw it: the original if sealed, else the stored view."""
    originals = unseal(getattr(row, "secrets", ""))
    return originals[name] if name in originals else getattr(row, name)


def unseal_into(row: Any) -> Any:
    """Put a loaded row's original values back on it, in memory only (never saved)."""
    for name, value in unseal(getattr(row, "secrets", "")).items():
        setattr(row, name, value)
    return row


def rotate(token: str) -> str:
    """The same secrets encrypted with the newest key."""
    return _cipher().rotate(token.encode()).decode() if token else token


def check_keys() -> None:
    """Fail at start-up, clearly, on a key that is not a Fernet key."""
    _cipher()


def new_key() -> str:
    return Fernet.generate_key().decode()


def _cipher() -> MultiFernet:
    return _cipher_for(tuple(settings.DURABLERUNS_ENCRYPTION_KEYS), settings.SECRET_KEY)


@functools.lru_cache(maxsize=4)
def _cipher_for(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        derived = hashlib.sha256(b"durableruns-secrets:" + secret_key.encode()).digest()
        keys = (base64.urlsafe_b64encode(derived).decode(),)
    fernets = []
    for index, key in enumerate(keys):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            raise SecretsUnavailable(
                f"DURABLERUNS_ENCRYPTION_KEYS item {index + 1} is not a Fernet key "
                "(32 url-safe base64-encoded bytes; `manage.py newsecretkey` makes one)"
            ) from None
    return MultiFernet(fernets)
