"""A WSGI app for tests/deploy/test_web_worker.py: a GET to /held/ holds its thread until
the file named by HELD_RELEASE exists (and says so by creating HELD_ENTERED); any other
request is answered at once with its method (GET /switch-interval/: the process's
GIL switch interval)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import django

# The worker reads the login path from the project's settings, as under the real app.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "durableruns.settings")
django.setup()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ["REQUEST_METHOD"] == "GET" and environ["PATH_INFO"] == "/held/":
        Path(os.environ["HELD_ENTERED"]).touch()
        deadline = time.monotonic() + 30
        while not Path(os.environ["HELD_RELEASE"]).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    environ["wsgi.input"].read()
    body = environ["REQUEST_METHOD"].encode()
    if environ["PATH_INFO"] == "/switch-interval/":
        body = repr(sys.getswitchinterval()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
