"""Production settings: `DJANGO_SETTINGS_MODULE=durableruns.settings_production`.

Everything in durableruns.settings still comes from the environment; this module
adds what a deployment behind a TLS-terminating proxy needs, and refuses to start
without a real SECRET_KEY or without its own DURABLERUNS_ENCRYPTION_KEYS. It passes
`manage.py check --deploy --fail-level WARNING`.
"""

from __future__ import annotations

import os

from .settings import *  # noqa: F403
from .settings import (
    DURABLERUNS_ENCRYPTION_KEYS,
    DURABLERUNS_TRUSTED_PROXIES,
    MIDDLEWARE,
    _env_bool,
    _env_list,
)

DEBUG = False
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure"):
    raise RuntimeError("set SECRET_KEY to a random string of at least 50 characters")
# Without its own keys, sealed secrets would use a key derived from SECRET_KEY: one leak
# (or rotation) of SECRET_KEY would then open (or lose) every sealed value.
if not DURABLERUNS_ENCRYPTION_KEYS:
    raise RuntimeError(
        "set DURABLERUNS_ENCRYPTION_KEYS in production: one or more Fernet keys, "
        "comma-separated, newest first (generate one with `manage.py newsecretkey`)"
    )
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost")
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", "")

# TLS is terminated by the proxy in front of gunicorn, which sets X-Forwarded-Proto.
# Trusted only when proxies are configured: without one, clients reach gunicorn
# directly and the header is their own claim.
if DURABLERUNS_TRUSTED_PROXIES > 0:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", True)
# /healthz and /metrics are probed over plain HTTP from inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
# No demo in production: no stand-in providers, and only the agents a deployment names
# (with none, the processes say so at start-up and the dashboard shows it).
DURABLERUNS_DEMO_PROVIDERS = False
DURABLERUNS_AGENT_MODULES = _env_list("DURABLERUNS_AGENT_MODULES", "")
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 31_536_000))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", True)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_AGE = int(os.environ.get("SESSION_COOKIE_AGE", 8 * 3600))
SESSION_EXPIRE_AT_BROWSER_CLOSE = True

STATIC_ROOT = os.environ.get("STATIC_ROOT", str(BASE_DIR / "staticfiles"))  # noqa: F405
# Static files straight from gunicorn, compressed and with far-future cache headers.
MIDDLEWARE = [*MIDDLEWARE]
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "whitenoise.middleware.WhiteNoiseMiddleware",
)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

MAILERS = {
    "default": {
        "BACKEND": os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend"),
        "OPTIONS": {
            "host": os.environ.get("EMAIL_HOST", "localhost"),
            "port": int(os.environ.get("EMAIL_PORT", 25)),
        },
    }
}
