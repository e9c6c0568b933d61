"""The scheduler's checkpoint advice: oak.job.should_checkpoint, the advice file and environment, the packaged
worker's ckpt_every: advised, and a job on a failing device losing fewer steps when it follows the advice."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oak.job as contract
from oak.engine.rules import advised_checkpoint_interval
from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.launch import DEFAULT_CKPT_EVERY, CommandSpec, WorkerSpec, rank_commands
from oak.runtime.scheduler import NODE_RATE_PRIOR_S, RuntimeOptions, RuntimeScheduler
from oak.runtime.store import JobRecord
from support.cli import oak

ROOT = Path(__file__).resolve().parent.parent
COUNT = str(ROOT / "examples" / "jobs" / "count.py")


@pytest.fixture
def fresh_advice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """oak.job's advice state reset, its clock a list the test moves, OAK_JOB_DIR a fresh folder."""
    monkeypatch.setattr(
        contract, "_advice", {"read_at": None, "interval": None, "last_ckpt": None, "checkpoint_s": None}
    )
    clock = [100.0]
    monkeypatch.setattr(contract.time, "monotonic", lambda: clock[0])
    monkeypatch.setenv("OAK_JOB_DIR", str(tmp_path))
    monkeypatch.delenv("OAK_CHECKPOINT_INTERVAL_S", raising=False)
    return clock


def test_should_checkpoint_follows_the_advised_interval(
    fresh_advice: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert contract.checkpoint_interval() is None and not contract.should_checkpoint()  # no advice: never due
    monkeypatch.setenv("OAK_CHECKPOINT_INTERVAL_S", "30")
    fresh_advice[0] += contract.ADVICE_READ_S  # the next look reads the launch's advice
    assert contract.checkpoint_interval() == 30.0
    fresh_advice[0] += 28.0  # 29 s since the first call (the interval counts from there)
    assert not contract.should_checkpoint()
    fresh_advice[0] += 1.5
    assert contract.should_checkpoint() and not contract.should_checkpoint()  # due once, then 30 s again
    (tmp_path / contract.ADVICE_FILE).write_text(json.dumps({"checkpoint_interval_s": 5.0}))
    fresh_advice[0] += 0.5
    assert contract.checkpoint_interval() == 30.0  # read again only after ADVICE_READ_S
    fresh_advice[0] += 5.0
    assert contract.checkpoint_interval() == 5.0 and contract.should_checkpoint()  # the file beats the launch's


def test_report_passes_the_checkpoint_time_and_rejects_nonsense(
    fresh_advice: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    status = tmp_path / "status.json"
    monkeypatch.setenv("OAK_STATUS_FILE", str(status))
    monkeypatch.setattr(
        contract, "_state", {"last_write": None, "last_step": None, "last_time": None, "installed": True}
    )
    contract.report(3, checkpoint_s=0.25)
    assert json.loads(status.read_text())["checkpoint_s"] == 0.25
    with pytest.raises(ValueError, match="checkpoint_s must be a number of seconds"):
        contract.report(4, checkpoint_s=-1.0)


def test_jobs_file_ckpt_every_advised() -> None:
    jf = parse_jobs("jobs:\n  - {name: a, model: tiny, target_steps: 10, ckpt_every: advised}\n", "a.yaml")
    assert jf.jobs[0].ckpt_every == 0
    with pytest.raises(OakInputError, match="ckpt_every='often': expected an integer >= 1 or 'advised'"):
        parse_jobs("jobs:\n  - {name: a, model: tiny, target_steps: 10, ckpt_every: often}\n", "a.yaml")


def test_a_launch_passes_the_advice_on(tmp_path: Path) -> None:
    """Every rank's environment has OAK_CHECKPOINT_INTERVAL_S; a packaged worker with ckpt_every: advised gets
    the advice in steps (DEFAULT_CKPT_EVERY before the scheduler knows its step time)."""
    worker = WorkerSpec(model="tiny", target_steps=10, batch_size=8, ckpt_every=0)
    ranks, _, _ = rank_commands(tmp_path, worker, 2, [0, 1], job_name="a")
    argv = ranks[0].argv
    assert argv[argv.index("--ckpt-every") + 1] == str(DEFAULT_CKPT_EVERY)
    assert "OAK_CHECKPOINT_INTERVAL_S" not in ranks[0].env
    (tmp_path / contract.ADVICE_FILE).write_text(json.dumps({"checkpoint_interval_s": 12.5, "ckpt_every": 7}))
    ranks, _, _ = rank_commands(tmp_path, worker, 2, [0, 1], job_name="a")
    argv = ranks[1].argv
    assert argv[argv.index("--ckpt-every") + 1] == "7" and ranks[1].env["OAK_CHECKPOINT_INTERVAL_S"] == "12.5"
    cmd, _, _ = rank_commands(tmp_path, CommandSpec(command=("true",)), 1, [0], job_name="a")
    assert cmd[0].env["OAK_CHECKPOINT_INTERVAL_S"] == "12.5"
    fixed = WorkerSpec(model="tiny", target_steps=10, batch_size=8, ckpt_every=9)
    ranks, _, _ = rank_commands(tmp_path, fixed, 1, [0], job_name="a")
    assert ranks[0].argv[ranks[0].argv.index("--ckpt-every") + 1] == "9"  # a job's own interval is its own


def test_the_advice_is_young_daly_of_the_measured_cost_and_rate_with_the_end_in_view(tmp_path: Path) -> None:
    text = "jobs:\n  - {name: a, model: tiny, target_steps: 1000, batch_size: 8}\n"
    opts = RuntimeOptions(devices=2, failure_rate=0.1, round_s=30.0)
    sched = RuntimeScheduler(parse_jobs(text, "a.yaml"), make_policy("oak"), tmp_path / "run", opts)
    job, r = sched.jobs[0], JobRecord("a")
    r.ckpt_write_s, r.t_progress_s, r.failures, r.injected = 0.5, 1000.0, 3, 1
    rate = 0.1 / 30.0 + 3.0 / (1000.0 + 1.0 / NODE_RATE_PRIOR_S)
    interval, steps = sched.checkpoint_advice(job, r, (0, 1))
    assert interval == pytest.approx(math.sqrt(2 * 0.5 / rate), rel=1e-12) and steps is None  # no step time yet
    r.failures += 5  # failing more where it runs: advised to checkpoint more often
    assert sched.checkpoint_advice(job, r, (0, 1))[0] < interval
    r.failures -= 5
    sched.learned.record(r, nodes=1, replicas=2, local_bsz=4.0, elapsed_s=2.0, steps=10)  # 0.2 s per step on 2
    for done in (0, 850):  # 200 s and 30 s left: checkpoints spread evenly over what is left
        r.step = done
        spread, steps = sched.checkpoint_advice(job, r, (0, 1))
        assert spread == pytest.approx(advised_checkpoint_interval(0.5, rate, (1000 - done) * 0.2), rel=1e-12)
        assert steps == round(spread / 0.2)
    assert spread == pytest.approx(15.0)  # 30 s left: one checkpoint, halfway
    r.step = 950  # 10 s left: no checkpoint pays before the end; the next one is advised at about the end
    assert sched.checkpoint_advice(job, r, (0, 1))[0] == pytest.approx(interval)


def test_the_advised_interval_is_the_best_even_spread_of_checkpoints_over_the_run_left() -> None:
    """n checkpoints spread evenly over R s left cost n·C + ρ·R²/(2(n + 1)): the advice R/(n + 1) takes the best n
    (a brute force over n agrees), no checkpoint (inf) once R ≤ 2√(C/ρ), Young/Daly's √(2C/ρ) without R, and
    Young/Daly again within a few per cent far from the end."""
    for c, rate in ((1.0, 1e-3), (4.0, 2e-5), (0.3, 0.01)):
        tau = math.sqrt(2 * c / rate)
        assert advised_checkpoint_interval(c, rate) == tau
        for remaining in np.geomspace(0.05 * tau, 200 * tau, 300):
            costs = [n * c + rate * remaining**2 / (2 * (n + 1)) for n in range(int(remaining / tau) + 3)]
            best = int(np.argmin(costs))
            got = advised_checkpoint_interval(c, rate, float(remaining))
            assert got == (math.inf if best == 0 else pytest.approx(remaining / (best + 1), rel=1e-12))
            assert (got == math.inf) == (remaining <= 2 * math.sqrt(c / rate) * (1 + 1e-12))
            if remaining > 50 * tau:
                assert got == pytest.approx(tau, rel=0.02)
    assert advised_checkpoint_interval(1.0, 0.0, 100.0) == math.inf  # no failures: no checkpoint pays


@pytest.mark.long
def test_a_job_following_the_advice_loses_fewer_steps_on_a_failing_device(tmp_path: Path) -> None:
    """count.py (300 steps of 0.05 s) with a failure injected at λ = 0.3 per 2 s round (seed 0: the same
    draws in both runs): checkpointing every 60 steps it loses tens of steps; following the advice
    (--ckpt-every 0: oak.job.should_checkpoint, its checkpoint time reported) a few at most."""

    def run(ckpt: str) -> dict[str, Any]:
        jobs = tmp_path / f"{ckpt}.yaml"
        args = f'[{sys.executable}, {COUNT}, --steps, "300", --step-s, "0.05", --ckpt-every, "{ckpt}"]'
        jobs.write_text(
            f"defaults: {{batch_size: 64, restart_penalty_s: 1}}\njobs:\n  - {{name: c, command: {args}}}\n"
        )
        d = tmp_path / f"run-{ckpt}"
        argv = ["run", str(jobs), "--cpu-slots", "1", "--failure-rate", "0.3", "--round-seconds", "2", "--seed", "0"]
        out = oak(*argv, "--run-dir", str(d))
        assert out.returncode == 0, out.stderr
        from oak.runtime.store import RunStore

        store = RunStore(d / "state.sqlite")
        try:
            rec = store.jobs()["c"]
        finally:
            store.close()
        assert rec.done and rec.injected >= 2, rec  # failures happened (else nothing is compared)
        assert 0 < rec.ckpt_write_s < 1.0 and 0 < rec.advice_s < 1.0  # measured, and advised accordingly
        return {"lost": rec.lost_steps, "advice": json.loads((d / "jobs" / "c" / contract.ADVICE_FILE).read_text())}

    fixed, advised = run("60"), run("0")
    assert fixed["lost"] >= 20 and advised["lost"] * 5 < fixed["lost"], (fixed, advised)


@pytest.mark.long
def test_the_packaged_worker_checkpoints_as_advised(tmp_path: Path) -> None:
    """ckpt_every: advised: the first launch checkpoints every DEFAULT_CKPT_EVERY steps (no step time known);
    after an injected failure the relaunch gets the advice in steps, far fewer on a device failing this often.
    At seed 0 job w's first injected failures fall at 9.9, 12.7 and 14.1 s: 800 steps of at least 0.02 s keep it
    running past them however fast the machine (400 steps could end before 9.9 s)."""
    jobs = tmp_path / "w.yaml"
    jobs.write_text(
        "jobs:\n  - {name: w, model: tiny, target_steps: 800, batch_size: 8, ckpt_every: advised, min_step_s: 0.02}\n"
    )
    d = tmp_path / "run"
    argv = ["run", str(jobs), "--cpu-slots", "1", "--failure-rate", "0.3", "--round-seconds", "2", "--seed", "0"]
    out = oak(*argv, "--run-dir", str(d))
    assert out.returncode == 0, out.stderr
    log = (d / "jobs" / "w" / "rank0.log").read_text()
    every = [int(n) for n in re.findall(r"'--ckpt-every', '(\d+)'", log)]
    assert len(every) >= 2 and every[0] == DEFAULT_CKPT_EVERY and 1 <= every[-1] < DEFAULT_CKPT_EVERY, every
