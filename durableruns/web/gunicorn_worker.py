"""gunicorn's threaded worker, with state changes served ahead of polls (issue 27).

Stock `gthread` hands every readable connection to one pool of `--threads` threads, in
arrival order, before anything of the request is read. With a team on the dashboard
that queue is mostly live polls (and page loads), so a reviewer's decision waited
behind them, even behind the polls that PollBackoffMiddleware then shed at once.

This worker looks at the first bytes a connection has sent (a peek: nothing is read
off the socket) and gives a state-changing request (POST, PUT, PATCH, DELETE) to a
second, small pool, `WRITE_THREADS` per process, that polls never enter. The login form
is the exception: it hashes a password on purpose, and anyone may send it, so it stays
in the shared pool rather than take the threads decisions need. Everything else -
parsing, keep-alive, time-outs, graceful stop - is gunicorn's own.

Its threads also hand the GIL over more often (`SWITCH_INTERVAL`). A decision is mostly
waits on Postgres, and after each query its thread needs the GIL back from a thread
rendering a poll or a page, which keeps it for up to the interpreter's switch interval
(5 ms by default). With a few renders in flight, the ten-odd queries of a decision that
costs 12-22 ms alone took 100-200 ms of such waits under the issue-27 team load.

A fresh connection whose request has not arrived yet waits on the worker's poller
(as gunicorn's own deferred connections do) instead of in a thread, so a proxy that
opens a connection per request is sorted the same way. TLS connections (gunicorn's own
`--certfile`) cannot be peeked at and are served by the shared pool, as before.
"""

from __future__ import annotations

import re
import selectors
import socket
import ssl
import sys
import time
from concurrent import futures
from functools import cached_property, partial
from typing import Any

from gunicorn.workers import gthread

# Per process, beside `--threads`; each keeps its own Postgres session like the others.
WRITE_THREADS = 2
STATE_CHANGING = re.compile(rb"(POST|PUT|PATCH|DELETE) (\S+)")
PEEK_BYTES = 512  # a request line: the method and the path
SWITCH_INTERVAL = 0.001  # seconds; CPython's default is 0.005


def serves_first(head: bytes, login_path: str | None) -> bool:
    """Whether a request starting with `head` is a state change for the write pool."""
    found = STATE_CHANGING.match(head)
    if found is None:
        return False
    path = found.group(2).split(b"?", 1)[0].decode("latin-1")
    return login_path is None or path != login_path


class ThreadWorker(gthread.ThreadWorker):
    """`--worker-class durableruns.web.gunicorn_worker.ThreadWorker`."""

    def init_process(self) -> None:
        # Before gunicorn's own set-up, which ends by running the worker's loop.
        sys.setswitchinterval(SWITCH_INTERVAL)
        self.writes = futures.ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="writes")
        super().init_process()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.writes.shutdown(wait=False)

    def handle_quit(self, sig: int, frame: Any) -> None:
        self.writes.shutdown(wait=False)
        super().handle_quit(sig, frame)

    def enqueue_req(self, conn: gthread.TConn) -> None:
        head = _head(conn)
        if head is None and not (conn.initialized or conn.data_ready):
            self._await_request(conn)
            return
        pool = self.writes if head and serves_first(head, self._login_path) else self.tpool
        done = pool.submit(self.handle, conn)
        done.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def _await_request(self, conn: gthread.TConn) -> None:
        """A new connection with nothing sent yet: the poller tells when it has, then it
        is sorted (gunicorn's `pending` connections, with its time-outs)."""
        conn.timeout = time.monotonic() + gthread.DEFAULT_WORKER_DATA_TIMEOUT + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(
            conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn)
        )

    @cached_property
    def _login_path(self) -> str | None:
        from django.conf import settings

        if not settings.configured:
            return None
        from django.shortcuts import resolve_url

        return str(resolve_url(settings.LOGIN_URL))


def _head(conn: gthread.TConn) -> bytes | None:
    """The first bytes of the connection's next request, without consuming them; None
    when nothing has arrived yet (or they cannot be read in clear)."""
    if conn.parser is not None:
        # Read ahead while the previous request's body was drained.
        buffered = conn.parser.unreader.buf.getvalue()
        if buffered:
            return bytes(buffered[:PEEK_BYTES])
    if isinstance(conn.sock, ssl.SSLSocket) or conn.cfg.is_ssl:
        return b""
    try:
        return conn.sock.recv(PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""  # the thread's read reports it, as for any broken connection
