"""Runs, their checkpointed steps and the effect ledger. Postgres is the truth."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from django.urls import reverse

CHECKPOINT_SCHEMA_VERSION = 1


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING = "waiting"
        AWAITING_APPROVAL = "awaiting_approval"
        # Waiting for its child runs to finish (engine/children.py): no lease, no worker.
        AWAITING_CHILD = "awaiting_child"
        ESCALATED = "escalated"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Kind(models.TextChoices):
        NATIVE = "native"
        # A LangGraph thread stored by durableruns.langgraph: LangGraph executes it,
        # so the executor and the sweeper never take it (see store.acquire_lease).
        LANGGRAPH = "langgraph"

    id = models.CharField(primary_key=True, max_length=64)
    kind = models.CharField(max_length=10, choices=Kind, default=Kind.NATIVE, db_default="native")
    agent = models.CharField(max_length=100)
    agent_version = models.CharField(max_length=100)
    input = models.JSONField()
    status = models.CharField(max_length=20, choices=Status, default=Status.QUEUED)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # What redaction matched in the JSON fields above, encrypted (engine/vault.py).
    secrets = models.TextField(blank=True, db_default="")
    max_steps = models.PositiveIntegerField()
    max_duration_seconds = models.FloatField()
    # Seconds spent handed back, waiting for a worker that has the run's agent version
    # (engine/handback.py): not the run's working time, so outside max_duration.
    handed_back_seconds = models.FloatField(default=0.0, db_default=0.0)
    # Escalated since (while an unsafe write's outcome is asked of a person), and the
    # seconds of earlier escalations: a person's time, outside max_duration too.
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalated_seconds = models.FloatField(default=0.0, db_default=0.0)
    steps_used = models.PositiveIntegerField(default=0)
    # The lease: who may execute the run, until when (database time), and the
    # fence every step and effect write is conditional on (invariant 6).
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fence = models.BigIntegerField(default=0)
    # Executor passes so far (one per lease taken); each pass replays the recorded steps.
    leases_taken = models.PositiveIntegerField(default=0, db_default=0)
    wake_at = models.DateTimeField(null=True, blank=True)
    rang_at = models.DateTimeField(null=True, blank=True)
    # The durable retry counter of the step at `retry_position` (one step at a time).
    retry_position = models.IntegerField(null=True, blank=True)
    retry_attempts = models.PositiveIntegerField(default=0)
    # [[started, finished], ...] (ISO 8601) of those failed attempts; the step's row
    # takes them over when it commits (Step.attempt_times).
    retry_attempt_times = models.JSONField(null=True, blank=True)
    last_error = models.JSONField(null=True, blank=True)
    # Retention (admin area): a held run is never deleted or redacted; a redacted
    # run keeps its ledger keys, states and decisions but no payloads.
    legal_hold = models.BooleanField(default=False)
    legal_hold_reason = models.CharField(max_length=500, blank=True, default="", db_default="")
    redacted_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    fork_position = models.PositiveIntegerField(null=True, blank=True)
    # A child run (engine/children.py): the run that started it, and the position of
    # the step there that waits for it. Distinct from `parent`, a fork's origin.
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    parent_position = models.PositiveIntegerField(null=True, blank=True)
    # A sandboxed run (a fork made to try something) never calls write tools; its
    # ledger records what they would have been called with.
    sandbox = models.BooleanField(default=False, db_default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # What the run's own model calls spent (engine/llm.py Spend), and its budgets.
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    tokens_cached = models.PositiveIntegerField(default=0, db_default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=10, default=0, db_default=0)
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_cost = models.DecimalField(max_digits=18, decimal_places=10, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    TERMINAL = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})
    # The others, spelled out: `status IN (...)` is read from the status index, where
    # `NOT status IN TERMINAL` scans the table.
    NOT_TERMINAL = (
        Status.QUEUED,
        Status.RUNNING,
        Status.WAITING,
        Status.AWAITING_APPROVAL,
        Status.ESCALATED,
    )
    EXECUTABLE = (Status.QUEUED, Status.RUNNING, Status.WAITING)

    class Meta:
        indexes = [
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            models.Index(fields=["-created_at", "id"], name="run_created"),
            models.Index(
                fields=["lease_expires_at"],
                name="run_running_lease",
                condition=Q(status="running"),
            ),
            models.Index(
                fields=["wake_at"], name="run_waiting_wake", condition=Q(status="waiting")
            ),
            models.Index(fields=["rang_at"], name="run_queued_rang", condition=Q(status="queued")),
            # The runs list sorted by cost (web/keyset.py COST_ORDER).
            models.Index(fields=["-cost", "id"], name="run_cost"),
        ]

    def __str__(self) -> str:
        return f"{self.agent}@{self.agent_version} {self.id} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("run", args=[self.id])

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def status_label(self) -> str:
        """The status as people read it; a LangGraph thread's is derived from its checkpoints."""
        if self.kind == self.Kind.LANGGRAPH:
            return LANGGRAPH_STATUS_LABELS.get(self.status, self.get_status_display())
        return self.get_status_display()

    @property
    def agent_label(self) -> str:
        """What the pages call the agent: a LangGraph thread's graph name (its Run has
        no version), a native agent's name@version."""
        if self.kind == self.Kind.LANGGRAPH:
            return self.agent
        return f"{self.agent}@{self.agent_version}"

    @property
    def ended_at(self) -> datetime | None:
        """When the run ended, or None while it may still go on. A LangGraph thread's
        finished_at is set when it stops at an interrupt too, which is not an end."""
        return self.finished_at if self.is_terminal else None

    @property
    def steps_text(self) -> str:
        """Steps used, and of how many when the run has a step budget (a LangGraph
        thread has none: its max_steps is 0)."""
        if self.max_steps:
            return f"{self.steps_used} / {self.max_steps}"
        return str(self.steps_used)

    @staticmethod
    def fill_langgraph_activity(runs: Iterable[Run]) -> None:
        """Set the langgraph threads' steps_used (their root checkpoints, LangGraph's
        supersteps) and updated_at (their newest checkpoint, when newer), counted from
        the checkpoints in one query: a checkpoint does not write its Run row, which
        made LangGraph's `put` three times slower than AsyncPostgresSaver's
        (docs/benchmarks.md). Every page and API answer that shows them calls this."""
        threads = {
            run.pk: run
            for run in runs
            if run.kind == Run.Kind.LANGGRAPH and not hasattr(run, "_langgraph_activity")
        }
        if not threads:
            return
        found = {
            thread: (steps, last)
            for thread, steps, last in LangGraphCheckpoint.objects.filter(thread_id__in=threads)
            .order_by()
            .values("thread_id")
            .annotate(
                steps=models.Count("id", filter=Q(checkpoint_ns="")),
                last=models.Max("created_at"),
            )
            .values_list("thread_id", "steps", "last")
        }
        for pk, run in threads.items():
            steps, last = found.get(pk, (0, None))
            run.steps_used = steps
            fresher = last is not None and "updated_at" not in run.get_deferred_fields()
            if fresher and (run.updated_at is None or last > run.updated_at):
                run.updated_at = last
            run._langgraph_activity = True


# A langgraph Run's status: running, interrupted (an interrupt awaits a decision),
# idle (nothing left to run: LangGraph may continue the thread), failed, cancelled.
LANGGRAPH_STATUS_LABELS = {
    Run.Status.RUNNING: "running",
    Run.Status.AWAITING_APPROVAL: "interrupted",
    Run.Status.SUCCEEDED: "idle",
    Run.Status.FAILED: "failed",
    Run.Status.CANCELLED: "cancelled",
}


# The Step.Kind values of steps that wait (for a person, a child run or a timer): the
# run page adds up their waits (web/views.py _own_waits) through a partial index.
WAITING_STEP_KINDS = ("approval", "child", "sleep")


class Step(models.Model):
    class Kind(models.TextChoices):
        LLM = "llm"
        TOOL = "tool"
        COMPUTE = "compute"
        APPROVAL = "approval"
        SLEEP = "sleep"
        CHILD = "child"

    # No index of its own: step_run_position leads with the run and serves every lookup
    # by run, and each index is written on every checkpoint (0012 dropped two).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    position = models.PositiveIntegerField()
    step_id = models.CharField(max_length=120)
    kind = models.CharField(max_length=10, choices=Kind)
    name = models.CharField(max_length=100)
    tool = models.CharField(max_length=100, blank=True, default="")
    fingerprint = models.CharField(max_length=16, blank=True, default="")
    input = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # What redaction matched in the JSON fields above, encrypted (engine/vault.py).
    secrets = models.TextField(blank=True, db_default="")
    attempts = models.PositiveIntegerField(default=1)
    # The failed attempts before the recorded one, [[started, finished], ...] in ISO
    # 8601, so the timeline draws each attempt; null for one attempt (or older rows).
    attempt_times = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    schema_version = models.PositiveSmallIntegerField(default=CHECKPOINT_SCHEMA_VERSION)
    # Which executor pass (Run.leases_taken at the time) executed the step, and its
    # lease owner; 0 and "" for steps copied into a fork or imported.
    lease_number = models.PositiveIntegerField(default=0, db_default=0)
    executed_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    # A branch of run.parallel/run.map (engine/parallel.py): the position of its
    # fan-out's first branch; null for a step agent code called on its own.
    fan_out = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="step_run_position"),
        ]
        indexes = [
            # The run page reads a run's few waiting steps on every render: without this
            # it filtered all of a 10,000-step run's rows (3 to 5 ms). Partial, so the
            # checkpoint of any other step never writes it.
            models.Index(
                fields=["run", "position"],
                name="step_run_waits",
                condition=Q(kind__in=list(WAITING_STEP_KINDS)),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.position} {self.kind} {self.name}"

    @property
    def duration_ms(self) -> float:
        return (self.finished_at - self.started_at).total_seconds() * 1000

    def replays_since(self, run: Run) -> int:
        """Later executor passes of `run`, each of which replayed this step from history."""
        if not self.lease_number:
            return 0
        return max(run.leases_taken - self.lease_number, 0)


class Effect(models.Model):
    class State(models.TextChoices):
        STARTED = "started"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        UNKNOWN = "unknown"
        RESOLVED = "resolved"
        SANDBOXED = "sandboxed"  # a write a sandboxed run did not make

    class Resolution(models.TextChoices):
        # What a person said an unknown outcome was; the pages show Effect.state_label.
        HAPPENED = "happened", "resolved: it had happened"
        NOT_HAPPENED = "not_happened", "resolved: it had not happened"
        ABORTED = "aborted", "resolved: run aborted"

    # Indexed by effect_run_position, which leads with the run (as Step.run).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="effects", db_index=False)
    position = models.PositiveIntegerField()
    idempotency_key = models.CharField(max_length=255, unique=True)
    tool = models.CharField(max_length=100)
    tool_kind = models.CharField(max_length=20)
    fingerprint = models.CharField(max_length=16)
    args = models.JSONField()
    state = models.CharField(max_length=10, choices=State, default=State.STARTED)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # What redaction matched in the JSON fields above, encrypted (engine/vault.py).
    secrets = models.TextField(blank=True, db_default="")
    attempts = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=20, choices=Resolution, blank=True, default="")
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["run", "position"], name="effect_run_position"),
            models.Index(
                fields=["started_at"], name="effect_unknown", condition=Q(state="unknown")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} ({self.state})"

    @property
    def state_label(self) -> str:
        """The state and any resolution as one phrase. A resolution stays on the row
        after the engine acts on it: one resolved `not_happened` is called again with
        the same key, and its state is then that call's outcome (engine/context.py)."""
        return EFFECT_STATE_LABELS.get((self.state, self.resolution), self.get_state_display())


_AGAIN = "called again, as the first call had not happened"
EFFECT_STATE_LABELS = {
    (Effect.State.RESOLVED, Effect.Resolution.HAPPENED): "Resolved: it had happened",
    (Effect.State.RESOLVED, Effect.Resolution.NOT_HAPPENED): (
        "Resolved: it had not happened, to be called again"
    ),
    (Effect.State.RESOLVED, Effect.Resolution.ABORTED): "Resolved: the run was aborted",
    (Effect.State.STARTED, Effect.Resolution.NOT_HAPPENED): f"Started: {_AGAIN}",
    (Effect.State.SUCCEEDED, Effect.Resolution.NOT_HAPPENED): f"Succeeded: {_AGAIN}",
    (Effect.State.FAILED, Effect.Resolution.NOT_HAPPENED): f"Failed: {_AGAIN}",
    (Effect.State.UNKNOWN, Effect.Resolution.NOT_HAPPENED): f"Unknown: {_AGAIN}",
    # Aborted, then resumed: the engine escalates it again (engine/context.py _recover).
    (Effect.State.UNKNOWN, Effect.Resolution.ABORTED): (
        "Unknown: the run was aborted, then resumed, before anyone said whether it happened"
    ),
}


class IdempotencyRecord(models.Model):
    """A request seen by a view guarded with @idempotent (Idempotency-Key semantics)."""

    class State(models.TextChoices):
        IN_FLIGHT = "in_flight"
        COMPLETED = "completed"

    scope = models.CharField(max_length=100)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=10, choices=State, default=State.IN_FLIGHT)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.BinaryField(null=True, blank=True)
    response_content_type = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="idempotency_scope_key"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key} ({self.state})"


class AuditEventQuerySet(models.QuerySet):
    def for_run(self, run: Run) -> AuditEventQuerySet:
        """The run's audit trail: actions on the run, its approvals (decisions, expiries)
        and its effects (escalation resolutions), oldest first, in one query. The run
        page, `exportrun` and the API all read it from here."""
        as_text = {"key": Cast("pk", models.CharField())}
        approvals = Approval.objects.filter(run_id=run.pk).values(**as_text)
        effects = Effect.objects.filter(run_id=run.pk).values(**as_text)
        trail = (
            Q(target_type="run", target_id=str(run.pk))
            | Q(target_type="approval", target_id__in=approvals)
            | Q(target_type="effect", target_id__in=effects)
        )
        if run.parent_id:
            # The fork that made this run is recorded on its parent; it is this run's
            # first human action too.
            trail |= Q(
                target_type="run",
                target_id=str(run.parent_id),
                action="run.fork",
                after__fork=str(run.pk),
            )
        return self.filter(trail).order_by("created_at", "pk")


class AuditEvent(models.Model):
    """An append-only record of a human action. On Postgres a trigger refuses UPDATE and DELETE.

    The actor is stored by id and name without a foreign key, so deleting a user or
    a run never needs to touch (and could never rewrite) the history.
    """

    actor_id = models.IntegerField(null=True, blank=True)
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=60)
    target_type = models.CharField(max_length=40)
    target_id = models.CharField(max_length=255)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="audit_target"),
            models.Index(fields=["-created_at"], name="audit_created"),
        ]
        permissions = [
            ("decide_approval", "Can approve, edit or reject suspended runs"),
            ("operate_run", "Can resolve escalations, cancel, resume, fork and replay runs"),
            ("manage_policies", "Can set retention and redaction policies and read the audit log"),
        ]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.target_type}:{self.target_id}"


# --- Approvals (human approval gates) -------------------------------------------


class Approval(models.Model):
    """A run suspended at `position` until a person (or expiry) decides.

    `payload` is exactly what the reviewer was shown (redacted before storage);
    `edited_payload` is what the reviewer replaced it with, if they edited it.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        # Closed because its run was cancelled: nobody decided anything.
        CLOSED = "closed"
        RESPONDED = "responded"
        # Dismissed without a decision (Agent Inbox's "ignore"): nothing approved.
        IGNORED = "ignored"

    class Decision(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        EDIT = "edit", "edit and approve"
        RESPOND = "respond", "answered"
        IGNORE = "ignore", "ignored"
        EXPIRE = "expire", "expired"

    # What a retention policy's redact action blanks (see durableruns/retention.py).
    RETENTION_REDACT_FIELDS = ("summary", "payload", "edited_payload")

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    summary = models.TextField(blank=True, default="")
    payload = models.JSONField(null=True, blank=True)
    allowed = models.JSONField(default=list)
    schema = models.JSONField(null=True, blank=True)
    guards = models.JSONField(null=True, blank=True)
    # What redaction matched in the JSON fields above, encrypted (engine/vault.py).
    secrets = models.TextField(blank=True, db_default="")
    four_eyes = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=State, default=State.PENDING)
    decision = models.CharField(max_length=10, choices=Decision, blank=True, default="")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decider_name = models.CharField(max_length=150, blank=True, default="")
    comment = models.TextField(blank=True, default="")
    edited_payload = models.JSONField(null=True, blank=True)
    # A reviewer who took the approval so two people do not work on it at once.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    on_expiry = models.CharField(max_length=10, default=Decision.REJECT)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    # The LangGraph interrupt this approval answers (a langgraph run's approvals only).
    interrupt_id = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="approval_run_position"),
            models.UniqueConstraint(
                fields=["run", "interrupt_id"],
                condition=~Q(interrupt_id=""),
                name="approval_run_interrupt",
            ),
        ]
        indexes = [
            models.Index(
                fields=["created_at"], name="approval_pending", condition=Q(state="pending")
            ),
            # The inbox at 10,000 pending: its newest pending approval, those newer than a
            # page's (the poll), and the count, read without the table (run id included).
            models.Index(
                fields=["id"],
                include=["run"],
                name="approval_pending_id",
                condition=Q(state="pending"),
            ),
            # The inbox history (newest decision first) and the poll's newest decision.
            models.Index(
                fields=["-decided_at", "-id"],
                name="approval_decided",
                condition=~Q(state="pending"),
            ),
            models.Index(
                fields=["expires_at"],
                name="approval_expiring",
                condition=Q(state="pending", expires_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.position} {self.name} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("approval", args=[self.pk])

    @property
    def is_pending(self) -> bool:
        return self.state == self.State.PENDING

    @property
    def decided_as(self) -> str:
        """A person's decision in words ("Approved", "Ignored", …)."""
        return DECIDED_AS.get(self.decision, "Rejected")

    @property
    def final_payload(self) -> object:
        """What the agent receives: the edit if there was one, else what was shown."""
        return self.edited_payload if self.decision == self.Decision.EDIT else self.payload


DECIDED_AS = {
    Approval.Decision.APPROVE: "Approved",
    Approval.Decision.EDIT: "Edited and approved",
    Approval.Decision.REJECT: "Rejected",
    Approval.Decision.RESPOND: "Answered",
    Approval.Decision.IGNORE: "Ignored",
}


# --- Admin: retention, redaction rules, legal hold (issue 6) -------------------
# Run.legal_hold and Run.redacted_at (in Run above) belong to this area too.


class RetentionPolicy(models.Model):
    """Delete or redact terminal runs of an agent after they are `age_days` old."""

    class Action(models.TextChoices):
        DELETE = "delete", "Delete the run entirely"
        REDACT = "redact", "Redact payloads, keep keys, states and decisions"

    name = models.CharField(max_length=100, unique=True)
    agent = models.CharField(
        max_length=100, blank=True, default="", help_text="Empty: every agent."
    )
    statuses = models.JSONField(default=list, help_text="Terminal statuses in scope.")
    age_days = models.PositiveIntegerField()
    action = models.CharField(max_length=10, choices=Action)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.action} after {self.age_days}d"

    def get_absolute_url(self) -> str:
        return reverse("policy", args=[self.pk])


class RetentionSweep(models.Model):
    """One application of the policies (by beat, the command, or an admin): the log."""

    policy = models.ForeignKey(
        RetentionPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="sweeps"
    )
    policy_name = models.CharField(max_length=100)
    action = models.CharField(max_length=10)
    dry_run = models.BooleanField(default=False)
    runs_affected = models.PositiveIntegerField(default=0)
    batches = models.PositiveIntegerField(default=0)
    duration_ms = models.FloatField(default=0)
    triggered_by = models.CharField(max_length=150, default="beat")
    started_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["-started_at"], name="sweep_started")]

    def __str__(self) -> str:
        return f"{self.policy_name} {self.action} {self.runs_affected} runs"


class RedactionRule(models.Model):
    """An admin's addition to the settings' redaction rules (never a replacement)."""

    class Kind(models.TextChoices):
        KEY = "key", "Key name"
        PATTERN = "pattern", "Value pattern (regular expression)"

    kind = models.CharField(max_length=10, choices=Kind)
    value = models.CharField(max_length=300)
    note = models.CharField(max_length=200, blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "value"], name="redaction_rule_unique"),
        ]
        ordering = ["kind", "value"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.value}"


class ApiToken(models.Model):
    """A token for scripts (the JSON API). Only a SHA-256 digest of the secret is kept:
    the token is 256 random bits, so a fast hash is enough, and a stolen database holds
    nothing that authenticates. `prefix` is public, to find the row and name the token."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"], name="apitoken_user")]

    def __str__(self) -> str:
        return f"{self.prefix} ({self.name or 'unnamed'})"


class SavedView(models.Model):
    """A person's named filters of the runs page (issue 24): the page's query string,
    stored normalised (web/saved_views.py: only the filters the page knows, checked as
    the page checks them), shown to its owner only, as a link to the page."""

    # The (owner, name) constraint's index serves the owner's list: no index of its own.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    name = models.CharField(max_length=80)
    query = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="saved_view_owner_name"),
        ]

    def __str__(self) -> str:
        return self.name


class SweeperBeat(models.Model):
    """The sweep leader's last sweep (one row): /healthz and /metrics read its age, so
    a stalled sweeper shows wherever it runs."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    swept_at = models.DateTimeField()
    swept_by = models.CharField(max_length=200, blank=True, default="")
    runs_rung = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"swept at {self.swept_at} by {self.swept_by}"


# --- LangGraph checkpoints (durableruns.langgraph) -----------------------------
# A LangGraph thread is a Run of kind "langgraph"; its checkpoints, channel blobs and
# pending writes are stored the way LangGraph's reference savers store them. Values
# stay in LangGraph's serialized form (type tag + bytes) and are never decoded
# here: the dashboard renders them through an allowlist (durableruns.langgraph.render).


class LangGraphThread(models.Model):
    """The thread behind a langgraph Run. Thread ids may be any string (NUL, lone
    surrogates, megabytes), so the id is stored as bytes and the Run id is its hash."""

    # Inserted with its Run, in the same statement or transaction: no database check
    # of the link (it locked the Run row again at every new thread; migration 0013).
    run = models.OneToOneField(
        Run,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="langgraph_thread",
        db_constraint=False,
    )
    thread_id_bytes = models.BinaryField()

    def __str__(self) -> str:
        return self.thread_id

    @property
    def thread_id(self) -> str:
        return bytes(self.thread_id_bytes).decode("utf-8", "surrogatepass")


# The LangGraph tables' thread foreign keys take no index of their own: each table's
# unique constraint starts with the thread, and serves its lookups. Every index is
# written at every checkpoint (docs/benchmarks.md, the LangGraph section).
#
# Checkpoints and blobs are only ever inserted under the fence, a lock on their Run
# (langgraph/sql.py; the ORM path updates the Run first), and a thread is deleted only
# with its Run and under a lock on it (store.delete_thread, retention). So their thread
# exists, and the database's own check is left out: at every checkpoint it locked the
# thread row again (0.06 ms of a 0.38 ms INSERT, pgbench). The writes keep theirs: a
# task's plain writes are not fenced, and a missing thread is found by that check.
class LangGraphCheckpoint(models.Model):
    thread = models.ForeignKey(
        LangGraphThread,
        on_delete=models.CASCADE,
        related_name="checkpoints",
        db_index=False,
        db_constraint=False,
    )
    checkpoint_ns = models.TextField(default="", blank=True)
    checkpoint_id = models.TextField()
    parent_checkpoint_id = models.TextField(default="", blank=True)
    type = models.TextField()
    checkpoint = models.BinaryField(null=True)
    metadata_type = models.TextField()
    metadata = models.BinaryField(null=True)
    # Copied out of the checkpoint so the dashboard and pruning need no decoding.
    channel_versions = models.JSONField(default=dict)
    next_nodes = models.JSONField(default=list)
    step = models.IntegerField(null=True)
    source = models.TextField(default="", blank=True)
    lg_run_id = models.TextField(default="", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id"], name="lg_checkpoint_unique"
            ),
        ]
        # For delete_for_runs (equality only: no pattern-ops twin, as db_index made).
        indexes = [models.Index(fields=["lg_run_id"], name="lg_checkpoint_run")]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.checkpoint_ns}:{self.checkpoint_id}"


class LangGraphBlob(models.Model):
    """One channel value at one version (shared by the checkpoints that saw it)."""

    thread = models.ForeignKey(
        LangGraphThread,
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,  # as the checkpoint's: inserted under the fence
    )
    checkpoint_ns = models.TextField(default="", blank=True)
    channel = models.TextField()
    version = models.TextField()
    type = models.TextField()
    blob = models.BinaryField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "channel", "version"], name="lg_blob_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.channel}@{self.version}"


class LangGraphWrite(models.Model):
    """A pending write of a task against a checkpoint (node output, error, interrupt)."""

    thread = models.ForeignKey(
        LangGraphThread, on_delete=models.CASCADE, related_name="writes", db_index=False
    )
    checkpoint_ns = models.TextField(default="", blank=True)
    checkpoint_id = models.TextField()
    task_id = models.TextField()
    task_path = models.TextField(default="", blank=True)
    idx = models.IntegerField()
    channel = models.TextField()
    type = models.TextField()
    blob = models.BinaryField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="lg_write_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.checkpoint_id} {self.task_id}#{self.idx} {self.channel}"
