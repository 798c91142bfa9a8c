"""Checkpoint schema versions: old step rows are migrated when they are read.

Version 1 stores a model reply as {"content": ..., "usage": {...}}. Version 0
(pre-release) stored the bare reply text. Add a function here for every change of
the stored shape, so runs suspended before a deploy still replay after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..models import CHECKPOINT_SCHEMA_VERSION, Step


class StepShape(Protocol):
    """A loaded Step row or an in-memory RecordedStep: migrations touch only these."""

    kind: str
    result: Any
    schema_version: int


def _v0_to_v1(step: StepShape) -> StepShape:
    if step.kind == Step.Kind.LLM and isinstance(step.result, str):
        step.result = {"content": step.result, "usage": {}}
    return step


MIGRATIONS: dict[int, Callable[[StepShape], StepShape]] = {0: _v0_to_v1}


def migrate[S: StepShape](step: S) -> S:
    while step.schema_version is not None and step.schema_version < CHECKPOINT_SCHEMA_VERSION:
        MIGRATIONS[step.schema_version](step)  # in place
        step.schema_version += 1
    return step
