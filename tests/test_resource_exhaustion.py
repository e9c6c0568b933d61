"""Resource exhaustion of `oak serve` (issue [hardening], row 10): thousands of jobs submitted for the future made
the idle service use half a core (every tick re-serialised, re-published and re-checked every job) — the
work per idle tick must not grow with jobs that have not arrived or are over."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from oak.policies import make_policy
from oak.runtime.learned import LearnedGoodput
from oak.runtime.scheduler import RuntimeOptions
from oak.runtime.store import RunStore
from oak.service.scheduler import ServiceScheduler

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
    sched = ServiceScheduler(make_policy("oak"), tmp_path / "run", RuntimeOptions(devices=2, tick_s=0.02))
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
        rows = sched._published_state["jobs"]
        idle_writes, idle_signatures = list(written), list(signatures)
        time.sleep(0.1)
        later = sched._published_state["jobs"]
    finally:
        sched.interrupted = True
        thread.join(30)
    assert len(first) == n and len(rows) == n
    assert len(idle_writes) > 10 and max(idle_writes) == 0, idle_writes[:5]  # ticks committed, no record rewritten
    assert idle_signatures == []  # no learned model re-checked
    assert all(a is b for a, b in zip(rows, later, strict=True))  # rows reused, not rebuilt
