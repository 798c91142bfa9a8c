"""Approval to resume: from a reviewer's decision to the next step starting.

Two solo-pool workers serve runs of the `bench-approval` agent (a step, an
approval gate, a step). For each run the benchmark waits until the approval is
pending, calls `durableruns.services.approvals.decide()` (the function the inbox view
calls) and measures from that call to the `started_at` of the step after the
gate: the decision's transaction, the doorbell, a worker taking the lease,
replaying the two recorded steps and starting the next.
"""

from __future__ import annotations

import importlib.util
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import section_main, setup_django, summary, wait_for, workers
from .throughput import create_runs, ring_all


def measure(quick: bool) -> dict[str, Any]:
    if importlib.util.find_spec("durableruns.services.approvals") is None:
        return {"not_measured": "durableruns.services.approvals is not in this branch"}
    url = setup_django()
    samples = 8 if quick else 40
    from django.contrib.auth import get_user_model

    from durableruns import roles
    from durableruns.models import Approval, Step
    from durableruns.services import approvals

    reviewer, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
    roles.grant(reviewer, roles.REVIEWER)
    delays: list[float] = []
    log_dir = Path(tempfile.mkdtemp(prefix="bench-approval-"))
    with workers(url, log_dir) as pool:
        procs = [pool.worker() for _ in range(2)]
        pool.wait_ready(procs)
        prefix = f"appr-{uuid.uuid4().hex[:8]}"
        for run_id in create_runs(samples + 2, "bench-approval", {}, prefix):
            ring_all([run_id], pool.queue)
            pending = wait_for(
                lambda run_id=run_id: Approval.objects.filter(
                    run_id=run_id, state=Approval.State.PENDING
                ).first(),
                timeout=60,
                message="a pending approval",
            )
            decided_at = datetime.now(UTC)
            approvals.decide(pending, "approve", user=reviewer, comment="benchmark")
            started = wait_for(
                lambda run_id=run_id: (
                    Step.objects.filter(run_id=run_id, name="after")
                    .values_list("started_at", flat=True)
                    .first()
                ),
                timeout=60,
                message="the step after the approval",
            )
            delays.append((started - decided_at).total_seconds())
    delays = delays[2:]  # the first two warm the workers' connections and imports
    return {"samples": len(delays), "decision_to_next_step_s": summary(delays), "samples_s": delays}


if __name__ == "__main__":
    section_main(measure)
