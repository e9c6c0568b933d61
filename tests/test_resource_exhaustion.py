"""Resource exhaustion of `oak serve` (issue [hardening], row 10): thousands of jobs submitted for the future made
the idle service use half a core (every tick re-serialised, re-published and re-checked every job) — the
work per idle tick must not grow with jobs that have not arrived or are over."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from oak.policies import make_policy
from oak.runtime.learned import LearnedGoodput
from oak.runtime.scheduler import RuntimeOptions
from oak.runtime.store import RunStore
from oak.service.scheduler import Service

FUTURE = 1.0e6  # submitted to start in 11.6 days


def test_an_idle_tick_does_no_work_for_future_jobs(tmp_path: Path, monkeypatch: Any) -> None:
    written: list[int] = []
    signatures: list[str] = []
    real_save, real_signature = RunStore.save, LearnedGoodput._signature

    def save(self: RunStore, records: Any, meta: Any = None, rnd: Any = None) -> None:
        written.append(len(records))
        real_save(self, records, meta, rnd)

    def signature(self: LearnedGoodput, job: Any, r: Any) -> Any:
        signatures.append(job.name)
        return real_signature(self, job, r)

    monkeypatch.setattr(RunStore, "save", save)
    monkeypatch.setattr(LearnedGoodput, "_signature", signature)
    sched = Service(make_policy("oak"), tmp_path / "run", RuntimeOptions(devices=2, tick_s=0.02))
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    try:
        n = 300
        jobs = "jobs:\n" + "".join(
            f"  - {{name: f{i}, command: [sleep, '1'], submit_s: {FUTURE + i}}}\n" for i in range(n)
        )
        assert sched.request("submit", {"text": jobs, "source": "future.yaml"})["ok"]
        first = sched.request("status", {})["jobs"]
        written.clear()
        signatures.clear()
        time.sleep(1.0)  # ~50 idle ticks
        rows = sched.publisher._state["jobs"]
        idle_writes, idle_signatures = list(written), list(signatures)
        time.sleep(0.1)
        later = sched.publisher._state["jobs"]
    finally:
        sched.stop()
        thread.join(30)
    assert len(first) == n and len(rows) == n
    assert len(idle_writes) > 10 and max(idle_writes) == 0, idle_writes[:5]  # ticks committed, no record rewritten
    assert idle_signatures == []  # no learned model re-checked
    assert all(a is b for a, b in zip(rows, later, strict=True))  # rows reused, not rebuilt


def test_idle_connections_are_closed_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 8: 300 idle connections to the Unix socket held 305 threads, never closed. Now at most
    MAX_CONNECTIONS are served at once (one more is told the service is busy), one idle for SOCKET_IDLE_S is
    closed, and the service answers once they are gone (the idle limit shortened to 2 s here)."""
    import socket

    from oak.service import protocol
    from oak.service.protocol import Listeners, call, socket_path

    monkeypatch.setattr(protocol._UnixHandler, "timeout", 2.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    listeners = Listeners(run_dir, lambda op, req: {"ok": True, "op": op}, None)
    idle: list[socket.socket] = []
    try:
        for _ in range(protocol.MAX_CONNECTIONS + 10):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(socket_path(run_dir)))  # blocking: waits while the listen backlog is full
            s.settimeout(5.0)
            idle.append(s)
        busy = [s.recv(4096) for s in idle[protocol.MAX_CONNECTIONS :]]
        assert all(b"oak serve is busy" in b for b in busy), busy[:2]
        assert threading.active_count() <= protocol.MAX_CONNECTIONS + 10
        closed = [s.recv(4096) for s in idle[: protocol.MAX_CONNECTIONS]]  # b"": the service closed it
        assert closed == [b""] * protocol.MAX_CONNECTIONS
        assert call(run_dir, "status") == {"ok": True, "op": "status"}
    finally:
        for s in idle:
            s.close()
        listeners.close()
