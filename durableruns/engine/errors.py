"""The failure classes agent and tool authors raise, and the engine's own stop signals.

Classification (one retry layer, in the engine):
- TransientError: safe to retry; retried with exponential backoff and full jitter,
  as a durable wake-up that holds no worker, up to a bounded number of attempts.
- ModelRecoverableError: returned to agent code so it can tell the model.
- PermanentError: not retried; fails the run unless agent code handles it.
- AmbiguousOutcome: the request may or may not have taken effect. Harmless to
  repeat for read-only and idempotent tools; an unsafe write goes to a human.
"""

from __future__ import annotations


class DurableRunsError(Exception):
    """Base of the errors agent code may see from a step."""


class TransientError(DurableRunsError):
    """A failure that is safe to retry (429, 503, a refused connection)."""


class ModelRecoverableError(DurableRunsError):
    """A failure the model can correct (validation error, malformed JSON)."""


class PermanentError(DurableRunsError):
    """A failure retrying cannot fix (401, 404 on a required resource)."""


class RetriesExhausted(PermanentError):
    """A transient failure that did not clear within the attempt budget."""


class ChildRunFailed(PermanentError):
    """A child run (`run.child`) failed: its error is the parent's step error."""


class ChildRunCancelled(ChildRunFailed):
    """A child run was cancelled before it finished."""


class AmbiguousOutcome(DurableRunsError):
    """The call may have taken effect; only the provider (or a human) can tell."""


class UsageError(DurableRunsError, TypeError):
    """Agent code misused the API: bad step name, missing tool argument, not JSON."""


class SerializationError(UsageError, ValueError):
    """A value that must be stored is not JSON, or is too large."""


class PayloadTooLarge(SerializationError):
    """A value over DURABLERUNS_MAX_PAYLOAD_BYTES (its message names the setting)."""


class UnknownAgent(DurableRunsError, LookupError):
    """No agent is registered under that name (and version)."""


class RunStopped(BaseException):
    """Stops the run with a recorded reason; agent code's `except Exception` cannot swallow it."""

    code = "stopped"

    def __init__(self, message: str, *, details: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class NonDeterminismError(RunStopped):
    code = "non_determinism"


class BudgetExceeded(RunStopped):
    code = "budget_exceeded"


class WrongThread(RunStopped):
    """A run.* call from a thread other than the agent function's: its position in the
    run's history would depend on thread timing, so replay could not reproduce it."""

    code = "wrong_thread"


class AgentVersionUnavailable(RunStopped):
    code = "agent_version_unavailable"


class SecretsUnavailable(RunStopped):
    """A run's stored secrets cannot be read: no configured key opens them, or
    retention shredded them. Replaying would hand agent code something else."""

    code = "secrets_unavailable"


class Suspend(BaseException):
    """Unwinds agent code so the run can wait without holding a worker."""

    def __init__(self, status: str, *, wake_at=None, reason: str = "", **fields: object) -> None:
        super().__init__(reason or status)
        self.status = status
        self.wake_at = wake_at
        self.reason = reason
        self.fields = fields


class LeaseLost(BaseException):
    """Another executor owns the run now; this one must stop without writing."""


class StoreUnavailable(LeaseLost):
    """The database connection failed during an engine write, so this executor cannot
    know what was committed. It stops like a lost lease (agent code cannot swallow
    it); the run continues from whatever Postgres holds, never marked failed for it."""


# Names under which a recorded error is raised again on replay.
REPLAYABLE_ERRORS: dict[str, type[DurableRunsError]] = {
    cls.__name__: cls
    for cls in (
        TransientError,
        ModelRecoverableError,
        PermanentError,
        RetriesExhausted,
        ChildRunFailed,
        ChildRunCancelled,
        AmbiguousOutcome,
        UsageError,
        SerializationError,
    )
}
