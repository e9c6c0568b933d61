"""The Ray executor: a full run through the runtime scheduler, bounded reservations, actor loss, reconciliation."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group  # noqa: E402

from oak.errors import OakInputError  # noqa: E402
from oak.policies import make_policy  # noqa: E402
from oak.runtime.executor import Launch  # noqa: E402
from oak.runtime.jobs_file import RuntimeJob, parse_jobs  # noqa: E402
from oak.runtime.ray_executor import RayExecutor  # noqa: E402
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler, newest_checkpoint_step  # noqa: E402
from support.runtime import check_done  # noqa: E402  (same completion check as the local executor)

pytestmark = [pytest.mark.xdist_group("ray")]

# A bound on each wait for Ray (a reservation, an actor's start), not a time any test spends: starting a rank
# actor means starting a Python worker process, which on a loaded 2-core CI machine has taken over 30 s.
WAIT_S = 120.0

TWO_JOBS = """
jobs:
  - {name: a, model: tiny, target_steps: 120, min_gpus: 1, max_gpus: 2, submit_s: 0, batch_size: 32,
     ckpt_every: 20, restart_penalty_s: 10}
  - {name: b, model: tiny, target_steps: 100, min_gpus: 1, max_gpus: 2, submit_s: 2, batch_size: 32,
     ckpt_every: 20, restart_penalty_s: 10}
"""
LONG_JOBS = """
jobs:
  - {name: x, model: tiny, target_steps: 100000, max_gpus: 2, batch_size: 32, ckpt_every: 1000}
  - {name: ghost, model: tiny, target_steps: 100000, max_gpus: 2, batch_size: 32, ckpt_every: 1000}
"""


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(
        num_cpus=4,
        resources={"oak_slot": 2},
        object_store_memory=80_000_000,
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


def _jobs(text: str) -> dict[str, RuntimeJob]:
    return {j.name: j for j in parse_jobs(text, "jobs.yaml").jobs}


def _live_groups(prefix: str = "oak:") -> list[str]:
    return [
        str(info["name"])
        for info in placement_group_table().values()
        if str(info["name"]).startswith(prefix) and info["state"] != "REMOVED"
    ]


def _gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


def _wait_for(cond: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.long
def test_scheduler_completes_two_jobs_on_ray(tmp_path: Path) -> None:
    jobs = parse_jobs(TWO_JOBS, "two.yaml")
    opts = RuntimeOptions(devices=2, round_s=3.0, seed=3, tick_s=0.1, time_limit_s=150)
    executor = RayExecutor(None, "cpu", 2, wait_timeout_s=WAIT_S)
    result = RuntimeScheduler(jobs, make_policy("oak"), tmp_path / "run", opts, executor=executor).run()
    assert all(j.jct_s is not None for j in result.jobs), result.jobs
    check_done(tmp_path / "run", {"a": 120, "b": 100})
    assert _live_groups() == []  # every incarnation's placement group was removed
    with sqlite3.connect(tmp_path / "run" / "state.sqlite") as con:
        rounds = [json.loads(a) for (a,) in con.execute("SELECT allocation FROM rounds")]
    assert rounds and all("_reconcile" not in r for r in rounds), rounds  # Ray ran exactly what was intended


def test_impossible_or_blocked_reservation_fails_fast_and_cleans_up(tmp_path: Path) -> None:
    job = _jobs(LONG_JOBS)["x"]
    executor = RayExecutor(None, "cpu", 2, wait_timeout_s=5.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(OakInputError, match=r"job 'x': cannot reserve 3 bundle\(s\) of \{'oak_slot': 1.0\}"):
            executor.launch(Launch(job, tmp_path / "jobs" / "x", (0, 1, 2), 0))
        assert time.monotonic() - t0 < 5.0
        # every slot held by someone else: the reservation waits wait_timeout_s, then fails and is removed
        blocker = placement_group([{"oak_slot": 1}] * 2, strategy="PACK", name="blocker")
        assert blocker.wait(10)
        try:
            t0 = time.monotonic()
            with pytest.raises(RuntimeError, match=r"job 'x': Ray could not reserve 1 bundle\(s\).*within 5 s"):
                executor.launch(Launch(job, tmp_path / "jobs" / "x", (0,), 0))
            assert 4.5 <= time.monotonic() - t0 < 15.0
        finally:
            remove_placement_group(blocker)
        assert _live_groups() == []
        assert executor.state("x") is None and executor.pids("x") == []
    finally:
        executor.shutdown()


def test_graceful_stop_then_killed_actor_makes_the_job_failed(tmp_path: Path) -> None:
    job = _jobs(LONG_JOBS)["x"]
    job_dir = tmp_path / "jobs" / "x"
    executor = RayExecutor(None, "cpu", 2, wait_timeout_s=WAIT_S)
    try:
        # stop: SIGTERM through the actors → checkpoint → exit 0 → "stopped", group removed
        executor.launch(Launch(job, job_dir, (0,), 0))
        assert _wait_for(lambda: ((executor.status("x") or {}).get("step", 0)) >= 5, 60.0), "x never trained"
        assert executor.stop(["x"], 30.0) == {"x": "stopped"}
        first = newest_checkpoint_step(job_dir)
        assert first >= 5 and executor.state("x") is None and _live_groups() == []
        # a new incarnation on two ranks resumes from that checkpoint; then one rank's actor is lost
        executor.launch(Launch(job, job_dir, (0, 1), 0))
        pids = executor.pids("x")
        assert len(pids) == 2
        assert _wait_for(lambda: ((executor.status("x") or {}).get("step", 0)) > first, 60.0), "x never resumed"
        assert executor.status("x")["pid"] == pids[0]  # type: ignore[index]
        assert executor.state("x") == "running"
        ray.kill(executor.actors("x")[1], no_restart=True)  # a lost rank (actor or node death)
        assert _wait_for(lambda: executor.state("x") == "failed", 30.0)
        assert executor.state("x") == "failed"
        executor.kill("x")
        assert _wait_for(lambda: all(_gone(p) for p in pids), 15.0), "a worker survived its job's failure"
        assert executor.state("x") is None
        assert _live_groups() == []
    finally:
        executor.shutdown()


def test_reconcile_reports_and_removes_what_is_not_intended(tmp_path: Path) -> None:
    jobs = _jobs(LONG_JOBS)
    run_dir = tmp_path / "run"
    executor = RayExecutor(None, "cpu", 2, wait_timeout_s=WAIT_S)
    stray = RayExecutor(None, "cpu", 2, wait_timeout_s=WAIT_S)  # e.g. a handle lost by an earlier scheduler
    stray.backend._swept = True  # running along: its first launch does not sweep the run's other groups
    try:
        executor.launch(Launch(jobs["x"], run_dir / "jobs" / "x", (0,), 0))
        assert executor.reconcile({"x": (0,)}) == []  # Ray runs what was intended
        stray.launch(Launch(jobs["ghost"], run_dir / "jobs" / "ghost", (1,), 0))
        pids = executor.pids("x") + stray.pids("ghost")
        assert len(_live_groups()) == 2
        issues = executor.reconcile({"y": (1,)})
        text = "\n".join(issues)
        assert "x: runs on 1 rank(s) but is not intended; killed" in text
        assert "ghost: placement group oak:" in text and "removed" in text
        assert "y: intended on 1 device(s), no process runs it" in text
        assert len(issues) == 3, issues
        assert executor.state("x") is None
        assert _wait_for(lambda: _live_groups() == [], 10.0)
        assert _wait_for(lambda: all(_gone(p) for p in pids), 15.0), "a worker outlived its placement group"
        assert _wait_for(lambda: stray.state("ghost") == "failed", 15.0)  # its actor died with the group
        assert executor.reconcile({}) == []
    finally:
        stray.shutdown()
        executor.shutdown()


def test_gpu_run_on_a_cluster_without_gpus_is_refused() -> None:
    """--gpus N on Ray never falls back to CPU slots: the module's cluster (2 oak_slot, no GPU) is refused for
    GPU runs, and --gpus auto (devices None) counts the cluster's GPUs, not the driver's."""
    for devices, asked in ((2, "the 2 devices asked for"), (None, "--gpus auto")):
        with pytest.raises(OakInputError, match=f"Ray cluster has 0 'GPU' in all, fewer than {asked}"):
            RayExecutor(None, "gpu", devices, wait_timeout_s=WAIT_S)
        assert ray.is_initialized()  # a Ray it did not start is left running


def test_command_jobs_run_on_ray_under_the_job_contract(tmp_path: Path) -> None:
    """A user's command (examples/jobs/count.py) runs as Ray rank actors with the contract's environment: a
    2-rank job and a 1-rank job finish, each step logged once (stops checkpoint; nothing is redone)."""
    count = str(Path(__file__).resolve().parent.parent / "examples" / "jobs" / "count.py")
    import sys

    text = "jobs:\n" + "".join(
        f'  - {{name: {n}, command: [{sys.executable}, {count}, --steps, "{s}", --step-s, "0.05", --ckpt-every,'
        f' "5"], min_gpus: {lo}, max_gpus: 2, submit_s: {t}}}\n'
        for n, s, lo, t in (("pair", 60, 2, 0), ("one", 40, 1, 1))
    )
    jobs = parse_jobs(text, "cmd.yaml")
    opts = RuntimeOptions(devices=2, round_s=3.0, tick_s=0.1, time_limit_s=240)
    sched = RuntimeScheduler(
        jobs, make_policy("oak"), tmp_path / "run", opts, executor=RayExecutor(None, "cpu", 2, wait_timeout_s=WAIT_S)
    )
    result = sched.run()
    assert all(j.jct_s is not None for j in result.jobs), result.jobs
    for name, total in (("pair", 60), ("one", 40)):
        steps = [int(x) for x in (tmp_path / "run" / "jobs" / name / "checkpoints" / "steps.log").read_text().split()]
        assert steps == list(range(1, total + 1)), name
    assert "rank 1/2: resuming" in (tmp_path / "run" / "jobs" / "pair" / "rank1.log").read_text()


def test_the_service_serves_on_ray(tmp_path: Path) -> None:
    """``oak serve --backend ray``'s scheduler: a job submitted while it runs finishes on Ray actors."""
    import sys
    import threading

    from oak.service.scheduler import Service

    count = str(Path(__file__).resolve().parent.parent / "examples" / "jobs" / "count.py")
    opts = RuntimeOptions(devices=2, round_s=2.0, tick_s=0.1, stop_timeout_s=20.0)
    sched = Service(
        make_policy("oak"), tmp_path / "run", opts, executor=RayExecutor(None, "cpu", 2, wait_timeout_s=WAIT_S)
    )
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    try:
        text = f'jobs:\n  - {{name: r, command: [{sys.executable}, {count}, --steps, "20", --step-s, "0.05"]}}\n'
        assert sched.request("submit", {"text": text, "source": "r.yaml"}) == {"ok": True, "submitted": ["r"]}
        deadline = time.monotonic() + 120
        while sched.request("status", {})["jobs"][0]["state"] != "done":
            assert time.monotonic() < deadline, sched.request("status", {})
            time.sleep(0.3)
    finally:
        sched.stop()
        thread.join(60)
    assert _live_groups() == []
