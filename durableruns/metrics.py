"""Prometheus metrics, computed from Postgres at scrape time (so any web process can
answer for all workers), plus step counters kept in the shared cache (Redis).

- durableruns_runs{status}                         runs by status
- durableruns_pending_approvals                    approvals waiting for a reviewer
- durableruns_oldest_pending_approval_age_seconds  how long the oldest has waited
- durableruns_open_escalations                     effects whose outcome is unknown
- durableruns_steps_total{kind,outcome}            steps executed vs replayed from history
                                                   (kind=tool: effects); since Redis started
- durableruns_step_duration_seconds                latency of steps finished in the window
- durableruns_last_sweep_age_seconds               since the sweep leader last swept
- durableruns_langgraph_steps_total                LangGraph supersteps checkpointed (root
                                                   graph) by threads still stored
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

from django.core.cache import cache
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .models import Approval, Effect, LangGraphCheckpoint, Run, Step, SweeperBeat

log = logging.getLogger(__name__)
LATENCY_WINDOW = timedelta(minutes=15)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STEP_KINDS = tuple(Step.Kind.values)
OUTCOMES = ("executed", "replayed")


def _counter_key(kind: str, outcome: str) -> str:
    return f"metrics:steps:{kind}:{outcome}"


# Steps counted by this process since its last flush. The engine counts on every step
# but talks to the shared cache at most once a second per process (flush_step_counts
# at the end of a task, and the liveness heartbeat for what is left), so no step waits
# for Redis, a Redis outage cannot slow or fail a run, and a worker finishing hundreds
# of runs a second does not make two Redis round trips for each.
_pending: Counter[tuple[str, str]] = Counter()
_flushed_at = 0.0  # time.monotonic() of this process's last flush


def count_step(kind: str, outcome: str) -> None:
    _pending[(kind, outcome)] += 1


def flush_step_counts(at_most_every: float = 0.0) -> None:
    """Add this process's counts to the shared counters, unless they were added less
    than `at_most_every` seconds ago; a failure keeps them for later."""
    global _flushed_at
    now = time.monotonic()
    if not _pending or now - _flushed_at < at_most_every:
        return
    _flushed_at = now
    while _pending:
        (kind, outcome), count = _pending.popitem()
        key = _counter_key(kind, outcome)
        try:
            if not cache.add(key, count, timeout=None):
                cache.incr(key, count)
        except Exception:
            _pending[(kind, outcome)] += count
            log.debug("step counter %s not updated", key, exc_info=True)
            return


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[object]:
        yield self._runs_by_status()
        yield from self._approvals()
        escalations = Effect.objects.filter(state=Effect.State.UNKNOWN).count()
        yield GaugeMetricFamily(
            "durableruns_open_escalations",
            "Effects whose outcome is unknown, waiting for an operator",
            value=escalations,
        )
        yield self._steps_total()
        yield from self._model_spend()
        yield self._step_latency()
        # A thread's steps are its root checkpoints (a checkpoint does not write its Run).
        langgraph = LangGraphCheckpoint.objects.filter(checkpoint_ns="").count()
        yield CounterMetricFamily(
            "durableruns_langgraph_steps",
            "LangGraph supersteps checkpointed by threads still stored",
            value=langgraph,
        )
        yield self._last_sweep_age()

    def _last_sweep_age(self) -> GaugeMetricFamily:
        swept_at = SweeperBeat.objects.filter(id=1).values_list("swept_at", flat=True).first()
        age = (timezone.now() - swept_at).total_seconds() if swept_at else float("inf")
        return GaugeMetricFamily(
            "durableruns_last_sweep_age_seconds",
            "Seconds since the sweep leader last swept (+Inf: never)",
            value=age,
        )

    def _model_spend(self) -> Iterator[CounterMetricFamily]:
        """Tokens and dollars the stored runs' model calls spent, per agent (one query)."""
        tokens = CounterMetricFamily(
            "durableruns_model_tokens",
            "Model tokens spent by runs still stored (type: prompt, completion, cached)",
            labels=["agent", "type"],
        )
        cost = CounterMetricFamily(
            "durableruns_model_cost_dollars",
            "Model cost in dollars of runs still stored (DURABLERUNS_MODEL_PRICES)",
            labels=["agent"],
        )
        sums = (
            Run.objects.order_by()
            .values_list("agent")
            .annotate(Sum("tokens_in"), Sum("tokens_out"), Sum("tokens_cached"), Sum("cost"))
        )
        for agent, prompt, completion, cached, dollars in sums:
            tokens.add_metric([agent, "prompt"], prompt or 0)
            tokens.add_metric([agent, "completion"], completion or 0)
            tokens.add_metric([agent, "cached"], cached or 0)
            cost.add_metric([agent], float(dollars or 0))
        yield tokens
        yield cost

    def _runs_by_status(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily("durableruns_runs", "Runs by status", labels=["status"])
        counts = dict(Run.objects.order_by().values_list("status").annotate(n=Count("id")))
        for status in Run.Status.values:
            family.add_metric([status], counts.get(status, 0))
        return family

    def _approvals(self) -> Iterator[GaugeMetricFamily]:
        pending = Approval.objects.filter(state=Approval.State.PENDING)
        count, oldest = pending.count(), pending.aggregate(t=Min("created_at"))["t"]
        age = (timezone.now() - oldest).total_seconds() if oldest else 0.0
        yield GaugeMetricFamily(
            "durableruns_pending_approvals", "Approvals waiting for a reviewer", value=count
        )
        yield GaugeMetricFamily(
            "durableruns_oldest_pending_approval_age_seconds",
            "Age of the oldest pending approval",
            value=age,
        )

    def _steps_total(self) -> CounterMetricFamily:
        family = CounterMetricFamily(
            "durableruns_steps",
            "Steps executed vs replayed from history (kind=tool: effects)",
            labels=["kind", "outcome"],
        )
        keys = {_counter_key(k, o): (k, o) for k in STEP_KINDS for o in OUTCOMES}
        try:
            values = cache.get_many(list(keys))
        except Exception:
            values = {}
        for key, labels in keys.items():
            family.add_metric(list(labels), values.get(key, 0))
        return family

    def _step_latency(self) -> HistogramMetricFamily:
        """One aggregate query, however many steps finished in the window."""
        since = timezone.now() - LATENCY_WINDOW
        duration = ExpressionWrapper(
            F("finished_at") - F("started_at"), output_field=DurationField()
        )
        steps = Step.objects.filter(finished_at__gte=since).annotate(duration=duration)
        counts = steps.aggregate(
            total=Count("id"),
            seconds=Sum("duration"),
            **{
                f"le{index}": Count("id", filter=Q(duration__lte=timedelta(seconds=le)))
                for index, le in enumerate(LATENCY_BUCKETS)
            },
        )
        buckets = [(str(le), counts[f"le{index}"]) for index, le in enumerate(LATENCY_BUCKETS)]
        buckets.append(("+Inf", counts["total"]))
        total = counts["seconds"].total_seconds() if counts["seconds"] else 0.0
        return HistogramMetricFamily(
            "durableruns_step_duration_seconds",
            f"Latency of steps finished in the last {int(LATENCY_WINDOW.total_seconds())} s",
            buckets=buckets,
            sum_value=total,
        )
