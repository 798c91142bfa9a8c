"""/healthz (database, broker and sweeper) and /metrics (Prometheus text, behind a token)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .. import metrics
from ..services import sweeper


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    body = {name: "ok" if ok else "down" for name, ok in checks.items()}
    checks["sweeper"] = checks["database"] and _sweeper_ok(body)
    return JsonResponse(body, status=200 if all(checks.values()) else 503)


def _sweeper_ok(body: dict[str, object]) -> bool:
    """No sweep for DURABLERUNS_SWEEP_STALE_AFTER intervals: nothing recovers runs,
    wakes sleepers or expires approvals, so the deployment is not healthy."""
    age = sweeper.last_sweep_age()
    stale = sweeper.sweeper_stale(age)
    body["sweeper"] = "never" if age is None else ("stale" if stale else "ok")
    body["last_sweep_age_seconds"] = None if age is None else round(age, 1)
    return not stale


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return False
    return True


def _broker_ok() -> bool:
    from ..celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            if conn.transport_cls == "redis" or "redis" in str(conn.transport_cls):
                conn.default_channel.client.ping()
    except Exception:
        return False
    return True


@login_not_required
@require_GET
def metrics_page(request: HttpRequest) -> HttpResponse:
    token = settings.DURABLERUNS_METRICS_TOKEN
    if not token:
        raise Http404("metrics are disabled: set DURABLERUNS_METRICS_TOKEN")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        return HttpResponse(
            "a valid bearer token is required\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": "Bearer"},
        )
    registry = CollectorRegistry()
    registry.register(metrics.DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
