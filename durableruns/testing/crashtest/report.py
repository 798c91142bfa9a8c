"""What crashtest prints: the table of crashed runs, the duplicates, the resume times."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from durableruns.models import Run

from .cluster import Options
from .plan import DIVERGED, ESCALATED, LOST, NOT_REACHED, Case


@dataclass
class Report:
    agent: str
    run_input: dict[str, Any]
    options: Options
    provider_url: str
    baseline: Run
    baseline_executions: Counter
    cases: list[Case]
    worker_restarts: int
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return sum(case.duplicates for case in self.cases)

    @property
    def deduplicated(self) -> int:
        return sum(sum(case.deduplicated.values()) for case in self.cases)

    @property
    def cut(self) -> int:
        return sum(sum(case.cut.values()) for case in self.cases)

    @property
    def lost(self) -> int:
        return sum(case.outcome == LOST for case in self.cases)

    @property
    def escalated(self) -> int:
        return sum(case.outcome == ESCALATED for case in self.cases)

    @property
    def ok(self) -> bool:
        return not any(case.failed for case in self.cases)

    def resume_times(self) -> list[float]:
        return sorted(c.resume_seconds for c in self.cases if c.resume_seconds is not None)

    def detect_times(self) -> list[float]:
        return sorted(c.detect_seconds for c in self.cases if c.detect_seconds is not None)

    def write(self, out: TextIO) -> None:
        _write_report(self, out)


_COLUMNS = ("crash point", "step", "outcome", "duplicates", "escalations", "time to resume", "run")


def _row(case: Case) -> tuple[str, ...]:
    resume = "-" if case.resume_seconds is None else f"{case.resume_seconds:.2f}s"
    return (
        case.point,
        case.step,
        case.outcome,
        str(case.duplicates),
        str(case.escalations),
        resume,
        case.run_id,
    )


def _percentile(values: list[float], fraction: float) -> float:
    index = min(len(values) - 1, max(0, round(fraction * len(values) + 0.5) - 1))
    return values[index]


def resume_summary(report: Report) -> str:
    times, detected = report.resume_times(), report.detect_times()
    if not times:
        return "no run needed resuming"
    settings_used = (
        f"lease TTL {report.options.lease_ttl:g}s, sweep interval "
        f"{report.options.sweep_interval:g}s"
    )
    line = (
        f"time to resume after SIGKILL (another worker holds the lease): "
        f"{_spread(times)} over {len(times)} runs ({settings_used})"
    )
    if detected:
        line += (
            f"\n  of which lease expiry until the sweeper rang the run: {_spread(detected)};"
            " the rest is waiting for a free worker"
        )
    return line


def _spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f}s, p95 {_percentile(values, 0.95):.2f}s, "
        f"max {values[-1]:.2f}s"
    )


def _write_report(report: Report, out: TextIO) -> None:
    rows = [_COLUMNS, *(_row(case) for case in report.cases)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
    for case in report.cases:
        if case.extra:
            out.write(f"DUPLICATE in {case.run_id}: {case.extra} (beyond the baseline's)\n")
        if case.deduplicated:
            out.write(
                f"DEDUPLICATED in {case.run_id}: {case.deduplicated} (re-sent with the same "
                "key and deduplicated by the provider: not a second effect)\n"
            )
        if case.cut:
            out.write(
                f"ASKED AGAIN in {case.run_id}: {case.cut} (a crash cut the model call "
                "before its answer was recorded)\n"
            )
    for warning in report.warnings:
        out.write(f"WARNING: {warning}\n")
    out.write(
        f"\n{len(report.cases)} crashed runs of {report.agent} "
        f"(baseline {report.baseline.id}: {report.baseline.status}): "
        f"{report.duplicates} duplicate executions, {report.lost} lost, "
        f"{report.escalated} escalated, "
        f"{sum(c.outcome == DIVERGED for c in report.cases)} diverged, "
        f"{sum(c.outcome == NOT_REACHED for c in report.cases)} not reached, "
        f"{report.deduplicated} deduplicated same-key re-sends, "
        f"{report.cut} model calls asked again after a crash cut them; "
        f"{report.worker_restarts} worker restarts; {report.seconds:.1f}s\n"
        f"{resume_summary(report)}\n"
    )
