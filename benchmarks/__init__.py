"""Benchmarks for durableruns: run on purpose with `make bench`, never by `make test`.

Each section is a module with `measure(quick: bool) -> dict`, run in its own
subprocess (`python -m benchmarks.SECTION`) against its own databases, so one
section's Django settings, workers or memory never leak into another's figures.
"""
