"""What the engine tells the outer layers, without importing them.

Receivers live outside the engine (e.g. `durableruns.services.approvals` mails the
reviewers). They are called after the engine's transaction commits, and an error
in one is logged, never raised: nothing outside may stop a run.
"""

from __future__ import annotations

from django.dispatch import Signal

# Sent with `approval=<Approval>` once a pending approval has been committed.
approval_opened = Signal()
