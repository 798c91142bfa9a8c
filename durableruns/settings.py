"""Settings, read from the environment (see README, "Configuration").

With nothing configured the product runs embedded: SQLite in var/ and a filesystem
Celery broker, so `make demo` works on a bare machine. Set DATABASE_URL and
REDIS_URL for Postgres and Redis, which is what production and the tests use.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from durableruns.dbpool import check_if_idle
from durableruns.secret_text import BUILT_IN_KEYS

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DURABLERUNS_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _json_object_env(name: str) -> dict:
    try:
        value = json.loads(os.environ.get(name) or "{}")
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object")
    return value


def _is_price(entry: object) -> bool:
    """A DURABLERUNS_MODEL_PRICES entry: input and output (and cached_input) in dollars."""
    if not isinstance(entry, dict) or not {"input", "output"} <= set(entry):
        return False
    try:
        amounts = [Decimal(str(value)) for value in entry.values()]
    except InvalidOperation:
        return False
    return all(amount.is_finite() and amount >= 0 for amount in amounts)


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _checkout_dirs(name: str) -> list[Path]:
    """templates/ or static/ at the top of a checkout; none when installed from the wheel.

    The wheel ships them inside the package (pyproject.toml), where APP_DIRS and the
    app-directories static finder find them like any app's own; listing them here too
    would make collectstatic report every file twice.
    """
    if (Path(__file__).resolve().parent / name).is_dir():
        return []
    return [BASE_DIR / name]


DEBUG = _env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and os.environ.get("DURABLERUNS_REQUIRE_SECRET_KEY"):
        raise RuntimeError("SECRET_KEY must be set in production")
    SECRET_KEY = "insecure-development-key-set-SECRET_KEY-in-production"  # noqa: S105
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "durableruns",
    "durableruns.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Malformed input (NUL, lone surrogates, huge text, deep JSON) is refused here,
    # with a 400, before any session, view or serializer sees it.
    "durableruns.validation.InputValidationMiddleware",
    # Before the session: counts the requests this process serves and, when busy,
    # answers live polls without touching the database (web/backoff.py).
    "durableruns.web.backoff.PollBackoffMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "durableruns.urls"
WSGI_APPLICATION = "durableruns.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": _checkout_dirs("templates"),
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_sqlite_default = f"sqlite:///{VAR_DIR / 'durableruns.sqlite3'}"
# Workers take their sessions from a pool of DURABLERUNS_DB_POOL_SIZE (Postgres only, set
# by the compose file's worker): hundreds of runs in flight in one thread-pool worker share
# it, and a run waiting on a model or a tool holds none (invariant 17); each worker process
# adds one liveness session and one for its sweeper thread. The web process keeps its
# sessions between requests when DURABLERUNS_CONN_MAX_AGE is set (the web command of the
# compose file and the image sets 60), checked before reuse, so a live page's poll every
# second is not a new Postgres session each time. Django's pool and persistent
# connections exclude each other: a process sets one or the other.
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", _sqlite_default),
        conn_max_age=int(_env_float("DURABLERUNS_CONN_MAX_AGE", 0)),
        conn_health_checks=True,
    )
}
DB_POOL_SIZE = int(_env_float("DURABLERUNS_DB_POOL_SIZE", 0))
if DB_POOL_SIZE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    if DATABASES["default"]["CONN_MAX_AGE"]:
        raise ImproperlyConfigured(
            "DURABLERUNS_DB_POOL_SIZE and DURABLERUNS_CONN_MAX_AGE exclude each other: "
            "set the pool for workers, persistent connections for the web process"
        )
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL_SIZE,
        # A thread that waits longer than this for a session fails its statement, and
        # the engine hands the run back (StoreUnavailable): the pool is too small.
        "timeout": _env_float("DURABLERUNS_DB_POOL_TIMEOUT", 30),
        # Checked before reuse only after a second unused, not at every handout.
        "check": check_if_idle,
    }
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Covering indexes (INCLUDE) are a Postgres speed-up; SQLite builds the index
    # without the extra columns, which is fine for the embedded demo, so Django's
    # warning about it would only be noise on every command.
    SILENCED_SYSTEM_CHECKS = ["models.W040"]
    VAR_DIR.mkdir(parents=True, exist_ok=True)  # the embedded default must just work
    # WAL lets the web process read while a worker writes; IMMEDIATE avoids
    # deadlocking upgrades from read to write locks between processes.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = _checkout_dirs("static")
STATIC_ROOT = BASE_DIR / "staticfiles"

MAILERS = {
    "default": {
        "BACKEND": os.environ.get(
            "EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
        ),
    }
}
# The file backend (`make demo` uses it): one file per message in this folder.
if os.environ.get("EMAIL_FILE_PATH"):
    MAILERS["default"]["OPTIONS"] = {"file_path": os.environ["EMAIL_FILE_PATH"]}

# --- Celery -----------------------------------------------------------------
# Redis only rings the doorbell ("look at run X"); Postgres holds what must happen.
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # kombu's ack emulation keeps each reserved doorbell in a Redis hash until it is
    # acked: a round trip when it is reserved, on the one consumer thread that takes
    # every doorbell in turn (and under load waits for the GIL after each), and one
    # when it is acked. With 1,000 runs started at once the last took its lease 5.4 s
    # after the first with it, 3.0 to 3.7 s without. What it buys is redelivery of a
    # doorbell a killed worker had reserved but not started, after a visibility
    # timeout of an hour; the sweeper already rings a queued run whose doorbell went
    # unanswered after DURABLERUNS_REDELIVER_AFTER (invariant 7), or as soon as the
    # death of a worker with runs in flight is noticed. A worker shutting
    # down cleanly still puts the doorbells it holds back on the queue.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"ack_emulation": False}
else:
    _broker_dir = VAR_DIR / "broker"
    # Every command of the embedded default may ring a doorbell, so the folders must
    # exist before the first one does (kombu lists them and does not create them).
    for _folder in (_broker_dir / "processed", _broker_dir / "control"):
        _folder.mkdir(parents=True, exist_ok=True)
    # The host is ignored by this transport, but without one kombu warns on every use.
    CELERY_BROKER_URL = "filesystem://localhost/"
    # kombu's transport with atomic writes: its own lets a worker read a half-written
    # message and die (durableruns/broker.py).
    CELERY_BROKER_TRANSPORT = "durableruns.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        # Broadcast (pidbox) exchanges; kombu's default is ./control in the cwd.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("DURABLERUNS_QUEUE", "durableruns")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# A task is acknowledged only after it returns, so a worker reserves no more doorbells
# than it has threads (or processes) free to run them, and a busy worker never holds one
# an idle worker could take. A killed worker loses those it reserved; the sweep leader
# rings their runs again once it notices the death (services/sweeper.py), else after
# DURABLERUNS_REDELIVER_AFTER (broker transport options above).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# advance_run yields (releases its lease and re-rings itself) after
# DURABLERUNS_MAX_TASK_SECONDS, so these limits only catch a wedged task.
CELERY_TASK_SOFT_TIME_LIMIT = 900
CELERY_TASK_TIME_LIMIT = 960
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 3
# A failed publish is not fatal (the sweeper rings the run again), so the web
# request must not hang retrying it.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.1, "interval_step": 0.2}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- durableruns engine defaults (all overridable from the environment) -----
DURABLERUNS_AGENT_MODULES = _env_list("DURABLERUNS_AGENT_MODULES", "durableruns.demo.agents")
# A web process serving this many other requests at once (the documented gunicorn runs
# 8 threads a process) sheds live polls and tells pages to wait this long between them.
DURABLERUNS_POLL_BUSY_AT = int(_env_float("DURABLERUNS_POLL_BUSY_AT", 6))
DURABLERUNS_POLL_BACKOFF_SECONDS = _env_float("DURABLERUNS_POLL_BACKOFF_SECONDS", 5.0)
DURABLERUNS_LEASE_TTL = _env_float("DURABLERUNS_LEASE_TTL", 30.0)
# durableruns.langgraph: the compiled graphs a worker resumes after a reviewer's
# decision, as "name=module:attribute" (a compiled graph, or a function returning one).
DURABLERUNS_LANGGRAPH_GRAPHS = _env_list("DURABLERUNS_LANGGRAPH_GRAPHS", "")
# The classes a stored LangGraph value may name, as "module.Name", on top of LangGraph's
# own safe set (plain data, datetimes, UUIDs, LangChain messages and documents, Send,
# Interrupt, Command). A value naming any other class is refused, never imported.
DURABLERUNS_LANGGRAPH_ALLOWED_TYPES = _env_list("DURABLERUNS_LANGGRAPH_ALLOWED_TYPES", "")
# The lease of a worker resuming a thread, renewed by its heartbeat (and by every
# checkpoint): the fallback for a hung worker, whose session still holds its process's lock.
DURABLERUNS_LANGGRAPH_LEASE_TTL = _env_float("DURABLERUNS_LANGGRAPH_LEASE_TTL", 300.0)
# A run whose agent, agent version or graph this worker lacks (a rolling deploy) waits
# this long for a worker that has it before it is tried again (engine/handback.py).
DURABLERUNS_HANDBACK_DELAY = _env_float("DURABLERUNS_HANDBACK_DELAY", 30.0)
DURABLERUNS_SWEEP_INTERVAL = _env_float("DURABLERUNS_SWEEP_INTERVAL", 5.0)
DURABLERUNS_REDELIVER_AFTER = _env_float("DURABLERUNS_REDELIVER_AFTER", 30.0)
# A dead executor is noticed through its Postgres session closing (a session advisory
# lock per worker process, covering all its runs: engine/liveness.py), checked this
# often by the sweep leader; the lease TTL stays the
# fallback for hangs and partitions. Turn it off behind a transaction-mode pooler
# (PgBouncer pool_mode=transaction), where session advisory locks do not work.
DURABLERUNS_DEAD_OWNER_DETECTION = _env_bool("DURABLERUNS_DEAD_OWNER_DETECTION", True)
DURABLERUNS_OWNER_CHECK_INTERVAL = _env_float("DURABLERUNS_OWNER_CHECK_INTERVAL", 0.5)
# Every worker runs a sweeper thread; one at a time leads (a Postgres advisory lock).
DURABLERUNS_SWEEPER_IN_WORKERS = _env_bool("DURABLERUNS_SWEEPER_IN_WORKERS", True)
# /healthz is unhealthy when no sweep was recorded for this many intervals.
DURABLERUNS_SWEEP_STALE_AFTER = _env_float("DURABLERUNS_SWEEP_STALE_AFTER", 3)
DURABLERUNS_MAX_TASK_SECONDS = _env_float("DURABLERUNS_MAX_TASK_SECONDS", 300.0)
DURABLERUNS_RETRY_MAX_ATTEMPTS = int(os.environ.get("DURABLERUNS_RETRY_MAX_ATTEMPTS", 5))
# Branches of one run.parallel/run.map executed at once (each holds a thread and, while
# it executes, a database session); the rest queue behind them in submission order.
DURABLERUNS_MAX_PARALLEL_BRANCHES = int(os.environ.get("DURABLERUNS_MAX_PARALLEL_BRANCHES", 8))
DURABLERUNS_RETRY_BASE_DELAY = _env_float("DURABLERUNS_RETRY_BASE_DELAY", 1.0)
DURABLERUNS_RETRY_MAX_DELAY = _env_float("DURABLERUNS_RETRY_MAX_DELAY", 300.0)
DURABLERUNS_DEFAULT_MAX_STEPS = int(os.environ.get("DURABLERUNS_DEFAULT_MAX_STEPS", 100))
DURABLERUNS_DEFAULT_MAX_DURATION = _env_float("DURABLERUNS_DEFAULT_MAX_DURATION", 3600.0)
DURABLERUNS_MAX_PAYLOAD_BYTES = int(os.environ.get("DURABLERUNS_MAX_PAYLOAD_BYTES", 1_048_576))
# Idempotency-Key records of @idempotent views (durableruns.idempotency): kept this
# long (7 days, longer than any run's time budget), pruned by beat every interval.
DURABLERUNS_IDEMPOTENCY_RETENTION = _env_float("DURABLERUNS_IDEMPOTENCY_RETENTION", 7 * 24 * 3600)
DURABLERUNS_IDEMPOTENCY_PRUNE_INTERVAL = _env_float("DURABLERUNS_IDEMPOTENCY_PRUNE_INTERVAL", 3600)
# An in-flight Idempotency-Key older than this is taken to be abandoned (its process died).
DURABLERUNS_IDEMPOTENCY_LOCK_TIMEOUT = _env_float("DURABLERUNS_IDEMPOTENCY_LOCK_TIMEOUT", 120)
DURABLERUNS_REDACT_KEYS = _env_list("DURABLERUNS_REDACT_KEYS", BUILT_IN_KEYS)
# The demo's stand-in payment and email providers (durableruns/demo/urls.py), served
# under /providers/ by the web process for the demo tools. Never in production
# (settings_production.py): they are anonymous and would execute anyone's refund.
DURABLERUNS_DEMO_PROVIDERS = _env_bool("DURABLERUNS_DEMO_PROVIDERS", True)
# Fernet keys (comma-separated, newest first) encrypting what redaction matches in
# replayable values: the newest encrypts, every listed key decrypts (rotation).
# Generate one with `manage.py newsecretkey`. Unset, a key is derived from SECRET_KEY
# (the demo, the tests); production (DURABLERUNS_REQUIRE_SECRET_KEY) must set it.
DURABLERUNS_ENCRYPTION_KEYS = _env_list("DURABLERUNS_ENCRYPTION_KEYS", "")
if (
    not DURABLERUNS_ENCRYPTION_KEYS
    and not DEBUG
    and os.environ.get("DURABLERUNS_REQUIRE_SECRET_KEY")
):
    raise RuntimeError(
        "DURABLERUNS_ENCRYPTION_KEYS must be set in production: one or more Fernet keys, "
        "comma-separated, newest first (generate one with `manage.py newsecretkey`)"
    )
# Where the demo tools find the stand-in providers (the web process serves them).
DURABLERUNS_PROVIDER_URL = os.environ.get("DURABLERUNS_PROVIDER_URL", "http://127.0.0.1:8000")
# Absolute links in emails (e.g. "an approval is waiting") start with this.
DURABLERUNS_BASE_URL = os.environ.get("DURABLERUNS_BASE_URL", "http://127.0.0.1:8000")
# Crash injection for crashtest and the chaos tests; unset in production.
DURABLERUNS_CRASH_DIR = os.environ.get("DURABLERUNS_CRASH_DIR", "")
# What crashtest asks for "what really executed": (run_id) -> Counter per "step_id:tool".
DURABLERUNS_CRASHTEST_COUNTER = os.environ.get(
    "DURABLERUNS_CRASHTEST_COUNTER", "durableruns.testing.crashtest.demo_executions"
)
# An OpenAI-compatible model endpoint; without it the scripted demo model answers.
# The engine's doorbell port (engine/doorbell.py): what tells a worker "look at run X".
DURABLERUNS_DOORBELL = os.environ.get("DURABLERUNS_DOORBELL", "durableruns.tasks.CeleryDoorbell")
DURABLERUNS_MODEL_URL = os.environ.get("DURABLERUNS_MODEL_URL", "")
DURABLERUNS_MODEL_API_KEY = os.environ.get("DURABLERUNS_MODEL_API_KEY", "")
DURABLERUNS_MODEL_NAME = os.environ.get("DURABLERUNS_MODEL_NAME", "gpt-4o-mini")
# "openai" (chat completions) or "anthropic" (Messages API) at DURABLERUNS_MODEL_URL.
DURABLERUNS_MODEL_API = os.environ.get("DURABLERUNS_MODEL_API", "openai")
# Dollars per million tokens: input, output, and cached_input (prompt tokens read from
# the provider's cache; default: input). A model is found by its exact name, else by
# the longest entry its name starts with; an unlisted model's cost is unknown (shown
# as such, not as $0). DURABLERUNS_MODEL_PRICES (JSON) adds or replaces entries.
# The figures are the providers' list prices when written: check yours.
DURABLERUNS_MODEL_PRICES = {
    "gpt-4o-mini": {"input": "0.15", "cached_input": "0.075", "output": "0.60"},
    "gpt-4o": {"input": "2.50", "cached_input": "1.25", "output": "10.00"},
    "claude-3-5-haiku": {"input": "0.80", "cached_input": "0.08", "output": "4.00"},
    "claude-sonnet-4": {"input": "3.00", "cached_input": "0.30", "output": "15.00"},
    # The scripted demo model (durableruns/demo/model.py), priced so the demo shows costs.
    "scripted-demo": {"input": "0.15", "output": "0.60"},
    **_json_object_env("DURABLERUNS_MODEL_PRICES"),
}
for _model, _price in DURABLERUNS_MODEL_PRICES.items():
    if not _is_price(_price):
        raise ImproperlyConfigured(
            f"DURABLERUNS_MODEL_PRICES[{_model!r}] needs 'input' and 'output' "
            "(dollars per million tokens), and may have 'cached_input'"
        )

# --- Admin area: retention, metrics, security (issue 6) ----------------------
# Seconds between retention sweeps by beat, and rows per short transaction.
DURABLERUNS_RETENTION_INTERVAL = _env_float("DURABLERUNS_RETENTION_INTERVAL", 3600.0)
DURABLERUNS_RETENTION_BATCH = int(os.environ.get("DURABLERUNS_RETENTION_BATCH", 500))
# /metrics answers only with `Authorization: Bearer <token>`; unset: /metrics is off.
DURABLERUNS_METRICS_TOKEN = os.environ.get("DURABLERUNS_METRICS_TOKEN", "")
# Failed logins allowed per (username, client address) within the window; a username
# from anywhere gets 4 times as many, a browser that signed in as it before its own
# allowance (durableruns/web/login_throttle.py).
DURABLERUNS_LOGIN_MAX_FAILURES = int(os.environ.get("DURABLERUNS_LOGIN_MAX_FAILURES", 5))
# Failed logins allowed per client address across usernames within the window: each
# costs a password hash, so this caps the hashing one address can make the site do.
DURABLERUNS_LOGIN_ADDRESS_MAX_FAILURES = int(
    os.environ.get("DURABLERUNS_LOGIN_ADDRESS_MAX_FAILURES", 20)
)
DURABLERUNS_LOGIN_WINDOW = _env_float("DURABLERUNS_LOGIN_WINDOW", 900.0)
# How many proxies in front of the web process append to X-Forwarded-For (1 behind the
# TLS proxy the README describes); 0 uses REMOTE_ADDR. Never more than there are:
# a client could then forge its address.
DURABLERUNS_TRUSTED_PROXIES = int(os.environ.get("DURABLERUNS_TRUSTED_PROXIES", 0))

CACHES = {
    # Without Redis, the default cache is this process's (Django's default).
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # A changed live poll's answer, shared by this process's viewers of one run at one
    # version for a second (web/live_rows.py): per process, so losing it loses nothing.
    "live": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "live-answers",
        "TIMEOUT": 1,
        "OPTIONS": {"MAX_ENTRIES": 1000},
    },
}
if REDIS_URL:
    # Shared by every process: login throttling and the redaction-rule cache.
    CACHES["default"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "durableruns",
    }

# Content Security Policy (Django 6): nothing inline, nothing from elsewhere.
# htmx's inline indicator styles are switched off by a meta tag in _base.html.
from django.utils.csp import CSP  # noqa: E402

MIDDLEWARE.insert(1, "django.middleware.csp.ContentSecurityPolicyMiddleware")
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Secure cookies and HTTPS redirects are for production (settings_production.py).
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        # On every handler: no secret reaches a log, and each line names its run and step.
        "redact": {"()": "durableruns.logs.RedactingFilter"},
        "run_context": {"()": "durableruns.logs.RunContextFilter"},
    },
    "formatters": {
        "plain": {
            "format": "%(asctime)s %(levelname)s %(name)s run=%(run_id)s "
            "step=%(step_id)s %(message)s"
        },
        "json": {"()": "durableruns.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            # The process's own stderr, not whatever sys.stderr is when LOGGING is
            # applied: a graph module calling django.setup() in a Celery worker applies
            # it again while Celery redirects sys.stderr into logging, and a handler
            # writing into logging drops every line (LoggingProxy's recursion guard).
            "stream": "ext://sys.__stderr__",
            "formatter": os.environ.get("DURABLERUNS_LOG_FORMAT", "plain"),
            "filters": ["run_context", "redact"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # Celery's "Task ... received" line, one per doorbell, carries no run id and is
        # written by the consumer thread that takes every doorbell in turn. Its write
        # gives up the GIL, and under load the thread waits behind hundreds of runs to
        # get it back: 1,000 runs started at once took 8.5 s with it, 6.8 s without
        # (benchmarks, "in-flight capacity"). Each task's "succeeded in" line stays.
        "celery.worker.strategy": {
            "level": os.environ.get("DURABLERUNS_TASK_RECEIVED_LOG_LEVEL", "WARNING")
        },
    },
}

# --- JSON API (durableruns.api) ---------------------------------------------------
# Token first: an anonymous request gets 401 with a WWW-Authenticate challenge.
# Session authentication (the browser) enforces CSRF on unsafe methods.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "durableruns.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "durableruns API",
    "DESCRIPTION": "Start, inspect and operate durable agent runs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Browsable docs from local static files, their script a separate file (CSP).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Deep links put a link inside each operation's expand button (axe: nested-interactive,
    # swagger-api/swagger-ui#9576): a screen reader hears one control, a keyboard finds two.
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "REDOC_DIST": "SIDECAR",
}
