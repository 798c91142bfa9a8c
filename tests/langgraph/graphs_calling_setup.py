"""A graph module written like examples/langgraph_refund.py: it calls django.setup()
itself, which in a worker that Django already set up runs the LOGGING config again."""

from __future__ import annotations

import django

django.setup()

from tests.langgraph.graphs import refund_graph  # noqa: E402

__all__ = ["refund_graph"]
