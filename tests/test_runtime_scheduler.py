"""The runtime scheduler on real (tiny) PyTorch workers: completion, measured counters, crash recovery."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RuntimeOptions, RuntimeScheduler
from support.runtime import check_done

TWO_JOBS = """
jobs:
  - {name: a, model: tiny, target_steps: 240, min_gpus: 1, max_gpus: 2, submit_s: 0, batch_size: 32,
     ckpt_every: 20, restart_penalty_s: 10}
  - {name: b, model: tiny, target_steps: 200, min_gpus: 1, max_gpus: 2, submit_s: 2, batch_size: 32,
     ckpt_every: 20, restart_penalty_s: 10}
"""


#: A failure seed whose stream (the simulator's, keyed by job name) fires for job "a" in each of the first eight
#: 3-s rounds (u < 0.5 for k = 0..7, checked below). With every step padded to 20 ms, job "a" needs at least
#: 4.8 s of training, longer than a round, so on any CPU it is killed in the first round after its launch (at
#: the latest at 12 s, when its age key admits it): the failure count does not depend on how fast the machine
#: trains. Without the padding a fast CPU finished both jobs between the stream's failure times.
STORMY_SEED = 259
STORMY_ROUND_S = 3.0


@pytest.mark.long
def test_jobs_complete_under_failures_and_counters_grow(tmp_path: Path) -> None:
    """λ = 0.5 with a seed whose first eight intervals all fail job a: every job still finishes with exactly its
    target steps; each injected failure is counted and costs a restart (every start is measured as restore time).
    The same counters at λ = 0 (none) are checked by test_single_job_jct_close_to_uninterrupted_run."""
    from oak.failures import rng

    key = np.array([rng.job_key("a")], dtype=np.uint64)
    assert all(rng.uniforms(STORMY_SEED, rng.STREAM_FAILURE, key, k)[0] < 0.5 for k in range(8))
    jobs = parse_jobs(
        TWO_JOBS.replace("restart_penalty_s: 10}", "restart_penalty_s: 10, min_step_s: 0.02}"), "two.yaml"
    )
    assert all(j.min_step_s == 0.02 for j in jobs.jobs)
    opts = RuntimeOptions(
        devices=2, failure_rate=0.5, round_s=STORMY_ROUND_S, seed=STORMY_SEED, tick_s=0.1, time_limit_s=400
    )
    sched = RuntimeScheduler(jobs, make_policy("oak"), tmp_path / "stormy", opts)
    stormy = sched.run()
    check_done(tmp_path / "stormy", {"a": 240, "b": 200})
    assert all(j.jct_s is not None for j in stormy.jobs)
    a = next(j for j in stormy.jobs if j.name == "a")
    assert a.failures >= 1
    # a finished job was started again after each of its failures; the totals of measured time are not compared
    # with a calm run: a start's wall-clock length on a loaded machine varies by more than one start
    assert all(j.restarts >= j.failures and j.t_ckpt_s > 0 for j in stormy.jobs)
    injected = [t for r in sched.records for t, _, why in r.history if why == "injected failure (SIGKILL)"]
    assert 1 <= len(injected) <= sum(j.failures for j in stormy.jobs)  # in the jobs' histories, with their times


def test_single_job_jct_close_to_uninterrupted_run(tmp_path: Path) -> None:
    """λ = 0, one job: the runtime's JCT is at most 2× the job's uninterrupted run plus one round and 10 s.

    The round: a lone job's only configuration has normalised goodput 1, so U = 1 < μ_na = 1.1 and OAK admits
    it once its age key lifts K·U above μ_na, at the first round after that (paper §VI's starvation guard).
    The 10 s: worker start-up (importing torch) on a busy machine, polling every tick_s."""
    from oak.runtime.launch import WorkerSpec, start_worker

    spec = WorkerSpec(model="tiny", target_steps=300, batch_size=32, ckpt_every=50)
    t0 = time.monotonic()
    with start_worker(tmp_path / "direct", spec, 1, [0]) as h:
        assert h.wait(300) == 0
    direct = time.monotonic() - t0
    text = "jobs:\n  - {name: solo, model: tiny, target_steps: 300, max_gpus: 1, batch_size: 32, ckpt_every: 50}\n"
    opts = RuntimeOptions(devices=1, round_s=5.0, tick_s=0.1)
    result = RuntimeScheduler(parse_jobs(text, "solo.yaml"), make_policy("oak"), tmp_path / "run", opts).run()
    jct = result.jobs[0].jct_s
    assert jct is not None
    assert jct <= 2.0 * direct + 5.0 + 10.0, (jct, direct)
    # no failure is injected at λ = 0, none restarts it, and its start is measured as restore time
    job = result.jobs[0]
    assert job.failures == 0 and job.restarts == 0 and job.t_ckpt_s > 0 and job.t_progress_s > 0


@pytest.mark.long
def test_scheduler_sigkill_resumes_every_job(tmp_path: Path) -> None:
    """SIGKILL the scheduler mid-run (injected failures going on); a new scheduler on the same run directory
    adopts the workers still running and finishes every job, each with exactly its target steps and no two
    incarnations at once."""
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(TWO_JOBS.replace("240", "400").replace("200", "360"))
    run_dir = tmp_path / "run"
    argv = [
        sys.executable,
        "-c",
        "from oak.cli.main import main; main()",
        "run",
        str(jobs_file),
        "--cpu-slots",
        "2",
        "--round-seconds",
        "3",
        "--failure-rate",
        "0.2",
        "--run-dir",
        str(run_dir),
    ]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    db = run_dir / "state.sqlite"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until both jobs have made progress
        time.sleep(0.5)
        if db.exists():
            try:  # the file exists a moment before its tables do
                with sqlite3.connect(db) as con:
                    recs = [json.loads(r) for (r,) in con.execute("SELECT record FROM jobs")]
            except sqlite3.OperationalError:
                continue
            if len(recs) == 2 and all(r["step"] > 0 or r["phase"] == "done" for r in recs):
                break
    assert first.poll() is None, "the scheduler ended before it could be killed"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    orphans = [p for r in recs for p in r["pids"]]
    second = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stdout + second.stderr
    for pid in orphans:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    check_done(run_dir, {"a": 400, "b": 360})
    with sqlite3.connect(db) as con:
        meta = dict(con.execute("SELECT key, value FROM meta"))
    assert json.loads(meta["resumed"]) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("jobs: []\n", "two.yaml:1: 'jobs' must be a non-empty list"),
        ("jobs:\n  - {name: a, model: big, target_steps: 5}\n", "jobs[0].model='big'"),
        ("jobs:\n  - {name: a, model: tiny, target_steps: 0}\n", "jobs[0].target_steps=0"),
        ("jobs:\n  - {name: a, model: tiny, target_steps: 5, min_gpus: 3, max_gpus: 2}\n", "expected >= min_gpus"),
        (
            "jobs:\n  - {name: a, model: tiny, target_steps: 5}\n  - {name: a, model: tiny, target_steps: 5}\n",
            "duplicates",
        ),
        ("jobs:\n  - {name: a, model: tiny, target_steps: 5, submit_s: -1}\n", "jobs[0].submit_s=-1"),
        ("jobs:\n  - {name: a, model: tiny, target_steps: 5, colour: red}\n", "unknown field"),
        ("jobs:\n  - {name: ../x, model: tiny, target_steps: 5}\n", "jobs[0].name='../x'"),
        ("jobs: [\n", "not valid YAML"),
        ("jobs:\n  - {name: a, model: tiny, target_steps: 5, min_step_s: -0.5}\n", "jobs[0].min_step_s=-0.5"),
        ("jobs:\n  - {name: a, model: tiny, target_steps: 5, min_step_s: 61}\n", "expected at most 60"),
    ],
)
def test_jobs_file_errors_name_line_and_field(text: str, expected: str) -> None:
    with pytest.raises(OakInputError, match=None) as exc:
        parse_jobs(text, "two.yaml", ("cifar10",))
    assert expected in str(exc.value)
    assert str(exc.value).startswith("two.yaml")


@pytest.mark.long
def test_corrupt_newest_checkpoint_is_skipped_and_counted(tmp_path: Path) -> None:
    """Interrupt a run, corrupt the job's newest checkpoint, resume: the worker falls back to the previous
    valid checkpoint, the job still ends with exactly its target steps, and the run records the loss."""
    text = "jobs:\n  - {name: c, model: tiny, target_steps: 3000, max_gpus: 1, batch_size: 32, ckpt_every: 20}\n"
    jobs = parse_jobs(text, "c.yaml")
    run_dir = tmp_path / "run"
    job_dir = run_dir / "jobs" / "c"
    opts = RuntimeOptions(devices=1, round_s=2.0, tick_s=0.05, time_limit_s=300.0)
    first_sched = RuntimeScheduler(jobs, make_policy("sia"), run_dir, opts)

    def interrupt_after_two_checkpoints(now: float, done: int, total: int) -> None:
        if len(list(job_dir.glob("ckpt-*.sha256"))) >= 2:
            first_sched.interrupted = True  # what SIGTERM does: stop with a checkpoint, resume later

    first = first_sched.run(progress=interrupt_after_two_checkpoints)
    assert first.jobs[0].jct_s is None, "the job finished before it was interrupted"
    ckpts = sorted(job_dir.glob("ckpt-*.pt"))
    assert len(ckpts) >= 2
    newest = ckpts[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    sched = RuntimeScheduler(jobs, make_policy("sia"), run_dir, opts)
    second = sched.run()
    assert second.jobs[0].jct_s is not None
    check_done(run_dir, {"c": 3000})
    assert sched.records[0].corrupt_skipped >= 1
    step = [int(p.stem.split("-")[1]) for p in ckpts]
    assert sched.records[0].lost_steps == step[-1] - step[-2]
