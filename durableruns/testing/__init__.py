"""Harnesses for testing agents built on durableruns (never imported by the engine)."""
