"""Faults of one job under `oak serve` (issue [hardening], rows 1 and 4): its folder made unwritable, its ranks
ignoring SIGTERM — that job pays, the scheduler and every other job go on."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from support.service import ONE_STEP
from support.service import in_process_service as _service


def test_an_unwritable_job_folder_fails_that_job_not_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row 1: a job folder made unwritable while the job runs (``chattr +i`` as root) made the scheduler's unlink
    of its status.json raise PermissionError: the whole service exited, and again on every restart. Now that
    job's launch fails (counted, backed off, retried), and the other job runs to its end."""
    from oak.policies import make_policy
    from oak.service.protocol import call

    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.parent.name == "ro" and self.name == "status.json":
            raise PermissionError(13, "Operation not permitted", str(self))
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    run_dir = tmp_path / "run"
    with _service(run_dir, make_policy("oak"), 2) as thread:
        cmd = ONE_STEP.format(py=sys.executable)
        jobs = "".join(f"  - {{name: {n}, command: {cmd}, max_gpus: 1}}\n" for n in ("ro", "ok"))
        assert call(run_dir, "submit", text="jobs:\n" + jobs, source="two.yaml")["ok"]
        deadline = time.monotonic() + 60
        while True:
            rows = {r["name"]: r for r in call(run_dir, "status")["jobs"]}
            if rows["ok"]["state"] == "done" and rows["ro"]["failures"] >= 1:
                break
            assert time.monotonic() < deadline and thread.is_alive(), rows
            time.sleep(0.2)
        assert thread.is_alive() and rows["ro"]["state"] != "done"


STUBBORN = """
import signal, time
import oak.job
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ignores the scheduler's request to checkpoint and exit
for step in range(1, 10**6):
    oak.job.report(step, total_steps=10**6)
    time.sleep(0.1)
"""


def test_cancelling_a_job_that_ignores_sigterm_does_not_freeze_the_scheduler(tmp_path: Path) -> None:
    """Row 4: ``oak cancel`` of a job that ignores SIGTERM froze the scheduler thread for the whole stop timeout
    (published time unchanged, no other job served). Now the cancel returns at once, the scheduler keeps
    ticking — publishing, taking a submission and running it to its end — and SIGKILLs the job at its deadline."""
    import json
    import sqlite3

    from oak.policies import make_policy
    from oak.service.protocol import call

    run_dir = tmp_path / "run"
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN, encoding="utf-8")
    with _service(run_dir, make_policy("oak"), 2, stop_timeout_s=8.0):
        job = f"jobs:\n  - {{name: s, command: [{sys.executable}, {script}], max_gpus: 1}}\n"
        assert call(run_dir, "submit", text=job, source="s.yaml")["ok"]
        deadline = time.monotonic() + 60
        while (row := call(run_dir, "status")["jobs"][0])["state"] != "running" or not row.get("step"):
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
        t0 = time.monotonic()
        assert call(run_dir, "cancel", name="s")["ok"]
        assert time.monotonic() - t0 < 2.0  # answered without waiting for the job
        clock = call(run_dir, "status")["time_s"]
        other = f"jobs:\n  - {{name: b, command: {ONE_STEP.format(py=sys.executable)}, max_gpus: 1}}\n"
        assert call(run_dir, "submit", text=other, source="b.yaml")["ok"]
        while (state := call(run_dir, "status"))["jobs"][1]["state"] != "done":
            assert time.monotonic() - t0 < 7.0, state  # served while the stubborn job still runs
            time.sleep(0.1)
        assert state["time_s"] > clock
        rows = {r["name"]: r for r in state["jobs"]}
        assert rows["s"]["state"] == "cancelled"
        with sqlite3.connect(run_dir / "state.sqlite") as con:
            rec = dict(con.execute("SELECT name, record FROM jobs"))
        alive = [p for p in json.loads(rec["s"])["pids"] if _running(p)]
        assert alive, "the stubborn job still runs before its deadline"
        while any(_running(p) for p in alive):
            assert time.monotonic() - t0 < 30.0  # SIGKILLed 8 s after the cancel
            time.sleep(0.2)
        assert time.monotonic() - t0 >= 7.5


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
