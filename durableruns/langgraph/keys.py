"""Idempotency keys for side effects in LangGraph nodes.

LangGraph runs a node again when a worker dies before the node's writes are stored,
so a node that sends an e-mail or moves money must send a key its provider
deduplicates by. `idempotency_key(tool, args)` is the native runs' key (invariant 3)
for the thread's run, the node's superstep and name, the tool and the arguments:
the same every time LangGraph re-runs the node, in any worker, and never time-based
or random (so not LangGraph's task id either: a checkpoint saved in the background
and lost in a crash gives the re-run task a new id).
"""

from __future__ import annotations

from typing import Any

from durableruns.engine import keys
from durableruns.langgraph.store import run_id_for


def idempotency_key(tool: str, args: dict[str, Any], config: Any = None) -> str:
    """The key for calling `tool` with `args` from the LangGraph node running now (or
    the node whose RunnableConfig is `config`)."""
    if config is None:
        from langgraph.config import get_config

        config = get_config()
    metadata = config.get("metadata") or {}
    if "langgraph_step" not in metadata or "langgraph_node" not in metadata:
        raise LookupError("idempotency_key() is called from a LangGraph node, or given its config")
    # A subgraph's node is named by the path of nodes to it (task ids are not stable).
    path = [
        part.split(":", 1)[0]
        for part in str(metadata.get("langgraph_checkpoint_ns", "")).split("|")
    ]
    node = "/".join(p for p in path if p) or str(metadata["langgraph_node"])
    step_id = f"{metadata['langgraph_step']}-{node}"
    return keys.idempotency_key(
        run_id_for(config["configurable"]["thread_id"]), step_id, tool, args
    )
