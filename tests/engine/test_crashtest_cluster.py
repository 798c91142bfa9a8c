"""crashtest's cluster leaves no worker behind: one respawned while the cluster stops
would sweep the next test's database, with another test's agents and graphs (CI saw a
LangGraph thread handed back for a minute to a worker that did not have its graph)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from durableruns.testing.crashtest import cluster as cluster_module
from durableruns.testing.crashtest.cluster import Cluster, Options
from tests.conftest import wait_for


def test_a_worker_dying_as_the_cluster_stops_is_not_replaced(tmp_path, monkeypatch):
    spawned: list[subprocess.Popen] = []
    reaping = threading.Event()
    real_terminate = cluster_module._terminate

    def spawn_worker(self) -> subprocess.Popen:
        spawned.append(subprocess.Popen(["sleep", "120"], start_new_session=True))
        return spawned[-1]

    def slow_terminate(proc: subprocess.Popen) -> None:
        # The supervisor reaping a dead worker is still at it when the cluster stops.
        if threading.current_thread().name == "crashtest-supervisor":
            reaping.set()
            threading.Event().wait(6)  # longer than the cluster waits for its threads
        real_terminate(proc)

    monkeypatch.setattr(Cluster, "_spawn_worker", spawn_worker)
    monkeypatch.setattr(Cluster, "_serve_providers", lambda self: None)
    monkeypatch.setattr(Cluster, "_sweep", lambda self: None)
    monkeypatch.setattr(Cluster, "_delete_queue", lambda self, app: None)
    monkeypatch.setattr(cluster_module, "_terminate", slow_terminate)

    cluster = Cluster(Options(workers=1), tmp_path).__enter__()
    os.killpg(spawned[0].pid, signal.SIGKILL)
    wait_for(reaping.is_set, timeout=10, message="the supervisor to reap the dead worker")
    cluster.__exit__()
    supervisor = next(t for t in cluster._threads if t.name == "crashtest-supervisor")
    supervisor.join(timeout=15)
    alive = [proc.pid for proc in spawned if proc.poll() is None]
    for proc in spawned:
        proc.kill()
    assert not alive, f"{len(alive)} worker(s) outlived the cluster"
