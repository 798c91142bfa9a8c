"""Checkpoint schema versions: old step rows are migrated when they are read.

Version 1 stores a model reply as {"content": ..., "usage": {...}}. Version 0
(pre-release) stored the bare reply text. Add a function here for every change of
the stored shape, so runs suspended before a deploy still replay after it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..models import CHECKPOINT_SCHEMA_VERSION, Step


def _v0_to_v1(step: Step) -> Step:
    if step.kind == Step.Kind.LLM and isinstance(step.result, str):
        step.result = {"content": step.result, "usage": {}}
    return step


MIGRATIONS: dict[int, Callable[[Step], Step]] = {0: _v0_to_v1}


def migrate(step: Step) -> Step:
    while step.schema_version is not None and step.schema_version < CHECKPOINT_SCHEMA_VERSION:
        step = MIGRATIONS[step.schema_version](step)
        step.schema_version += 1
    return step
