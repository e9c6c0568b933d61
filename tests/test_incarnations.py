"""The incarnation layer: a fourth backend needs only launch, kill and list.

``Popens`` below is a whole backend in a few lines — each rank a plain ``subprocess.Popen`` of the command
``rank_commands`` builds — with no outcome rule, stop, status, reconciliation or reaping of its own. Under
``Incarnations`` the real runtime scheduler runs command jobs on it to completion through a crash, a stop
asked at the time limit, and a job that is not intended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from oak.policies import make_policy
from oak.runtime.executor import Executor, Launch, job_spec
from oak.runtime.incarnations import Adopting, Incarnations, Ranks
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.launch import rank_commands
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler

COUNT = str(Path(__file__).resolve().parent.parent / "examples" / "jobs" / "count.py")


class Popens:
    """A backend of plain processes: launch, kill, list."""

    device_kind = "cpu"

    def __init__(self) -> None:
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}

    def launch(self, item: Launch) -> None:
        ranks, _, _ = rank_commands(
            item.job_dir, job_spec(item.job, item.seed), len(item.devices), item.devices, job_name=item.job.name
        )
        item.job_dir.mkdir(parents=True, exist_ok=True)
        with open(item.job_dir / "ranks.log", "ab") as log:
            self.procs[item.job.name] = [
                subprocess.Popen(r.argv, env=r.env, stdout=log, stderr=log, start_new_session=True) for r in ranks
            ]

    def kill(self, name: str, sig: int) -> None:
        for p in self.procs.get(name, []):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            if sig == signal.SIGKILL:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)

    def list(self) -> dict[str, Ranks]:
        return {n: Ranks(tuple(p.pid for p in ps), tuple(p.poll() for p in ps)) for n, ps in self.procs.items()}


def _count(name: str, steps: int, extra: str = "", **fields: object) -> str:
    more = "".join(f", {k}: {v}" for k, v in fields.items())
    args = f'[{sys.executable}, {COUNT}, --steps, "{steps}", --step-s, "0.05", --ckpt-every, "5"{extra}]'
    return f"  - {{name: {name}, command: {args}{more}}}\n"


def test_a_backend_of_launch_kill_and_list_runs_the_scheduler(tmp_path: Path) -> None:
    backend = Popens()
    ex = Incarnations(backend)
    assert not isinstance(backend, Adopting)  # a capability it does not declare: adopt says False
    _: Executor = ex  # the whole protocol the scheduler drives
    text = "jobs:\n" + _count("a", 30, max_gpus=2) + _count("crash", 20, ', --fail-at, "8"')
    jobs = parse_jobs(text, "jobs.yaml")
    opts = RuntimeOptions(devices=3, round_s=1.0, tick_s=0.05, retry_backoff_s=0.2)
    sched = RuntimeScheduler(jobs, make_policy("oak"), tmp_path / "run", opts, ex)
    result = sched.run()
    rows = {r.name: r for r in sched.records}
    assert all(r.done for r in rows.values()), rows
    assert rows["crash"].failures == 1 and rows["crash"].restarts >= 1  # exit 1 at step 8: failed, restarted
    assert any(w.startswith("rank exit statuses [1]") for _, _, w in rows["crash"].history)
    assert {j.name for j in result.jobs if j.jct_s is not None} == {"a", "crash"}
    steps = [int(s) for s in (tmp_path / "run" / "jobs" / "a" / "checkpoints" / "steps.log").read_text().split()]
    assert sorted(set(steps)) == list(range(1, 31))


def test_stop_at_the_time_limit_and_what_is_not_intended(tmp_path: Path) -> None:
    """A job still running at the run's time limit is asked to stop (SIGTERM: it checkpoints and exits 0,
    ``stopped``); a job Ray-style 'left over' in the backend and not intended is killed by reconcile."""
    backend = Popens()
    ex = Incarnations(backend)
    jobs = parse_jobs("jobs:\n" + _count("long", 10_000), "jobs.yaml")
    opts = RuntimeOptions(devices=1, round_s=1.0, tick_s=0.05, time_limit_s=3.0, stop_timeout_s=20.0)
    sched = RuntimeScheduler(jobs, make_policy("oak"), tmp_path / "run", opts, ex)
    sched.run()
    r = sched.records[0]
    assert not r.done and r.failures == 0 and r.history[-1][2] == "the scheduler shut down: stopped"
    ckpt = json.loads((tmp_path / "run" / "jobs" / "long" / "checkpoints" / "ckpt.json").read_text())
    assert ckpt["step"] > 0  # its stop was checkpointed
    stray = subprocess.Popen(["sleep", "60"], start_new_session=True)
    backend.procs["stray"] = [stray]
    assert ex.reconcile({}) == ["stray: runs on 1 rank(s) but is not intended; killed"]
    assert stray.wait(10) == -signal.SIGKILL
