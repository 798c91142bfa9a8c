from __future__ import annotations

import os

# Playwright's sync API runs an event loop in the test thread, and its browser
# fixtures live across tests; the ORM calls the tests make around it are still
# plain synchronous calls. Processes that stand for a deployment are started
# without this switch (tests/deploy/environ.py).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
