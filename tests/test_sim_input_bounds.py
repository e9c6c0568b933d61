"""Bounds on the simulator's inputs and metrics: an arrival jitter that could push a job past the horizon (a
negative JCT before), a --round too short for a run to ever finish, and ``oak workloads synth`` writing submit
times the loaders refuse."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oak.catalog import Catalog
from oak.engine.metrics import JobResult, RunResult
from oak.engine.rules import PhysicsOptions
from oak.errors import OakInputError
from oak.policies import make_policy
from oak.sim.simulator import Simulator
from oak.workloads import load_workload
from oak.workloads.loader import MAX_TIME_S
from oak.workloads.philly import TraceModel, synth_workload_text, synthesize

NEAR_HORIZON = "name,submit_time_s,application,min_gpus,max_gpus\nj0,0,cifar10,1,4\nj1,990,bert,1,4\n"


def _oak(*args: str, cwd: Path, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """The ``oak`` command in a subprocess of its own session; a run past ``timeout`` fails the test (it would
    never end) and its whole process group, workers included, is killed."""
    argv = [sys.executable, "-c", "from oak.cli.main import main; main()", *args]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"oak {' '.join(args)} still running after {timeout:g} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _job(name: str, submit_s: float, jct_s: float | None) -> JobResult:
    return JobResult(name, "cifar10", submit_s, jct_s, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _run(jobs: tuple[JobResult, ...], end_s: float) -> RunResult:
    return RunResult("oak", "w", 0.0, 0, jobs, (0.1,), end_s, end_s, 0.0)


# ---------------------------------------------------------------- 1. arrival jitter and negative JCTs


def test_jitter_past_the_horizon_is_refused_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "nearh.csv").write_text(NEAR_HORIZON)
    args = ("simulate", "--workload", "nearh.csv", "--horizon", "1000", "--arrival-jitter", "500", "--seed", "1")
    res = _oak(*args, "--json", "nh.json", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error:" in res.stderr and "--arrival-jitter 500" in res.stderr and "at most 10 s" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "nh.json").exists()
    # compare shares the option and the refusal
    cmp = _oak("compare", "--workload", "nearh.csv", "--policies", "oak", *args[3:7], cwd=tmp_path)
    assert cmp.returncode == 2 and "--arrival-jitter 500" in cmp.stderr and "Traceback" not in cmp.stderr


def test_jitter_past_the_horizon_is_refused_by_the_simulator(tmp_path: Path) -> None:
    (tmp_path / "nearh.csv").write_text(NEAR_HORIZON)
    wl = load_workload(str(tmp_path / "nearh.csv"))
    with pytest.raises(OakInputError, match=r"--arrival-jitter 500: .*'j1'.* at most 10 s"):
        Simulator(wl, physics=PhysicsOptions(arrival_jitter_s=500.0, horizon_s=1000.0))


def test_jitter_up_to_the_gap_runs_with_every_jct_non_negative(tmp_path: Path) -> None:
    """A jitter of exactly the gap from the last submission to the horizon is accepted: every arrival lies
    before the horizon, for every seed, and every JCT (censored ones included) is >= 0."""
    (tmp_path / "nearh.csv").write_text(NEAR_HORIZON)
    wl = load_workload(str(tmp_path / "nearh.csv"))
    sim = Simulator(wl, physics=PhysicsOptions(arrival_jitter_s=10.0, horizon_s=1000.0))
    for seed in range(8):
        res = sim.run(make_policy("oak"), 0.0, seed)
        assert all(j.submit_s < 1000.0 for j in res.jobs)
        jct = res.jcts()
        assert (jct >= 0).all(), (seed, jct)
        s = res.summary()
        assert s["mean_jct_s"] >= 0 and s["median_jct_s"] >= 0


def test_censored_jct_of_a_job_submitted_after_the_end_is_zero_not_negative() -> None:
    """A result built outside the simulator (``oak run`` stopped by --time-limit before a job's submit_s):
    an unfinished job counts the time it spent in the run, never end − submission < 0."""
    res = _run((_job("a", 0.0, 600.0), _job("b", 100.0, None), _job("late", 1500.0, None)), end_s=1000.0)
    assert res.jcts().tolist() == [600.0, 900.0, 0.0]
    s = res.summary()
    assert s["mean_jct_s"] == pytest.approx(500.0) and s["median_jct_s"] == 600.0
    assert s["unfinished_jobs"] == 2


def test_a_jitter_well_inside_the_horizon_runs() -> None:
    """The refusal leaves a jitter well inside the horizon alone (the embedded workloads' results)."""
    wl = load_workload("small")
    res = Simulator(wl, physics=PhysicsOptions(arrival_jitter_s=120.0, horizon_s=6e5)).run(make_policy("oak"), 0.0, 3)
    assert res.finished and (res.jcts() > 0).all()


# ---------------------------------------------------------------- 2. --round lower bound


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_round_shorter_than_a_second_exits_2(command: str, tmp_path: Path) -> None:
    res = _oak(command, "--workload", "small", "--round", "1e-9", cwd=tmp_path, timeout=60.0)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error: --round 1e-09: expected at least 1 s" in " ".join(res.stderr.split())
    assert "3e+15 rounds" in res.stderr and "Traceback" not in res.stderr
    neg = _oak(command, "--workload", "small", "--round", "-5", cwd=tmp_path, timeout=60.0)
    assert neg.returncode == 2 and "--round -5: expected at least 1 s" in neg.stderr


def test_round_of_one_second_is_accepted(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = _oak("simulate", "--workload", "small", "--round", "1", "--horizon", "2000", "--json", str(out), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (run,) = json.loads(out.read_text())["runs"]
    assert run["rounds"] >= 1000 and run["mean_jct_s"] >= 0


# ---------------------------------------------------------------- 3. synth refuses what the loaders refuse


@pytest.mark.parametrize("scale", ["1e-300", "5e-324"])
def test_synth_refuses_submit_times_the_loaders_refuse(scale: str, tmp_path: Path) -> None:
    res = _oak("workloads", "synth", "--jobs", "20", "--scale", scale, "--out", "x.csv", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error: --scale" in res.stderr and "--jobs 20" in res.stderr and "Traceback" not in res.stderr
    assert "RuntimeWarning" not in res.stderr
    assert not (tmp_path / "x.csv").exists()


def test_synthesize_checks_the_last_submit_time() -> None:
    from oak.model.cluster import cluster_preset

    model, cluster = TraceModel.packaged(), cluster_preset("sia-64")
    with pytest.raises(OakInputError, match=r"--scale 1e-300 with --jobs 20: .*submitted at .* past the 1e\+09 s"):
        synthesize(model, 20, cluster, 1e-300, 0)
    # many jobs at a sparse rate overflow the limit too: the count is named with the scale
    with pytest.raises(OakInputError, match=r"--scale 0.0001 with --jobs 5000"):
        synthesize(model, 5000, cluster, 1e-4, 0)


def test_synth_output_near_the_limit_loads(tmp_path: Path) -> None:
    """What synth accepts, the loader reads (a sparse but valid scale)."""
    text, made = synth_workload_text(20, "sia-64", 1e-5, 0)
    assert made[-1].submit_time_s <= MAX_TIME_S
    path = tmp_path / "sparse.csv"
    path.write_text(text)
    wl = load_workload(str(path), known_apps=Catalog.load().apps.keys())
    assert len(wl.jobs) == 20


# ---------------------------------------------------------------- 4. --rules and the options it sets


@pytest.mark.parametrize(
    ("option", "shown"),
    [
        (["--no-bootstrap"], "--no-bootstrap contradicts --rules sia-artifact, which sets --bootstrap"),
        (["--restart-on", "move"], "--restart-on move contradicts --rules sia-artifact, which sets --restart-on shape"),
        (["--replicas-cap"], "--replicas-cap contradicts --rules sia-artifact, which sets --no-replicas-cap"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_an_option_the_rules_would_override_is_refused(command: str, option: list[str], shown: str) -> None:
    """``--rules sia-artifact`` replaced the seven options it names, so ``--no-bootstrap`` beside it was dropped
    without a word; an option given as the set has it, or one it does not name, still runs."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    base = [command, "--workload", "small", "--rules", "sia-artifact", "--horizon", "20000"]
    res = CliRunner().invoke(app, [*base, *option])
    assert res.exit_code == 2, res.output
    assert shown in " ".join(res.output.split()), res.output
    extra = ["--seeds", "1", "--failure-rates", "0", "--workers", "1"] if command == "compare" else []
    ok = CliRunner().invoke(app, [*base, *extra, "--bootstrap", "--round", "30"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize("seed", [-1, 1 << 64, 2.0, True])
def test_the_simulator_refuses_a_seed_that_is_not_64_bit(seed: object) -> None:
    """The failure streams mix ``seed mod 2^64``: -1 and 2^64 - 1 would be one run under two labels."""
    from oak.errors import OakInputError
    from oak.model.cluster import cluster_preset
    from oak.policies import make_policy
    from oak.sim.simulator import Simulator
    from oak.workloads import load_workload

    sim = Simulator(load_workload("small"), cluster_preset("paper-12"))
    with pytest.raises(OakInputError, match="expected an integer from 0 to 2\\^64 - 1"):
        sim.run(make_policy("oak"), 0.1, seed)  # type: ignore[arg-type]
    assert sim.run(make_policy("oak"), 0.1, (1 << 64) - 1).jobs
