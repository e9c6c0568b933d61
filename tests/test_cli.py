"""The command line: the documented commands work, write the documented JSON, and bad input exits 2 cleanly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oak.workloads import load_workload
from support.cli import oak


def _documented(item: str) -> set[str]:
    """The JSON keys docs/cli.md lists in its "JSON output" bullet that starts with ``item``."""
    section = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = section.split("## JSON output", 1)[1].split("\n## ", 1)[0]
    bullet = next(b for b in section.split("\n- ")[1:] if b.startswith(item))
    return set(re.findall(r"`([a-z0-9_]+)`", bullet))


RUN_KEYS = _documented("each run:")
HARDWARE_KEYS = _documented("with a hardware")
JOB_KEYS = _documented("each job:")


def test_compare_writes_documented_json(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = oak("compare", "--workload", "small", "--policies", "oak,sia,goodput", "--failure-rates", "0,0.1",
              "--seeds", "2", "--workers", "2", "--json", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "mean JCT" in res.stdout
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 3 * 2 * 2
    assert len(RUN_KEYS) > 20 and len(JOB_KEYS) > 10 and "paper" not in HARDWARE_KEYS
    for run in runs:
        assert set(run) == RUN_KEYS, "docs/cli.md lists every key"
        assert len(run["jobs"]) == 4
        for job in run["jobs"]:
            assert set(job) == JOB_KEYS, "docs/cli.md lists every key"
    hardware = tmp_path / "hw.json"
    res = oak("compare", "--workload", "small", "--policies", "oak", "--seeds", "1", "--failure-rates", "0",
              "--failure-model", "llama3:scale=300", "--json", str(hardware))  # fmt: skip
    assert res.returncode == 0, res.stderr
    (run,) = json.loads(hardware.read_text())["runs"]
    assert set(run) == RUN_KEYS | HARDWARE_KEYS
    # Paired: at λ = 0 seeds are identical (no randomness left), at λ = 0.1 they differ.
    by = {(r["policy"], r["failure_rate"], r["seed"]): r for r in runs}
    assert by[("oak", 0.0, 0)]["mean_jct_s"] == by[("oak", 0.0, 1)]["mean_jct_s"]


def test_simulate_prints_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "one.json"
    res = oak("simulate", "--workload", "small", "--policy", "sia", "--failure-rate", "0.05", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert "makespan" in res.stdout
    assert json.loads(out.read_text())["runs"][0]["policy"] == "sia"


def test_run_writes_the_json_shape_of_simulate(tmp_path: Path) -> None:
    """``oak run --json`` and ``oak simulate --json`` write the same document: {"runs": [run, ...]}."""
    pytest.importorskip("torch")
    jobs = tmp_path / "one.yaml"
    jobs.write_text(
        "jobs:\n  - {name: solo, model: tiny, target_steps: 20, max_gpus: 1, batch_size: 8, ckpt_every: 10}\n"
    )
    real, sim = tmp_path / "run.json", tmp_path / "sim.json"
    res = oak("run", str(jobs), "--policy", "sia", "--cpu-slots", "1", "--round-seconds", "1",
              "--run-dir", str(tmp_path / "run"), "--json", str(real))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert oak("simulate", "--workload", "small", "--policy", "sia", "--json", str(sim)).returncode == 0
    doc, sim_doc = json.loads(real.read_text()), json.loads(sim.read_text())
    assert set(doc) == set(sim_doc) == {"runs"}
    (run,) = doc["runs"]
    assert set(run) >= RUN_KEYS and set(run) == set(sim_doc["runs"][0])
    assert run["policy"] == "sia" and [j["name"] for j in run["jobs"]] == ["solo"]
    assert set(run["jobs"][0]) >= JOB_KEYS and run["jobs"][0]["jct_s"] is not None


def test_workloads_list_and_show() -> None:
    res = oak("workloads", "list")
    assert res.returncode == 0 and "ckpt-variance" in res.stdout
    res = oak("workloads", "show", "medium")
    assert res.returncode == 0 and "imagenet-4" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("simulate", "--policy", "nope"), "policy 'nope' is unknown"),
        (("simulate", "--p", "-0.5"), "p=-0.5"),
        (("simulate", "--policy", "oak-paper", "--k-max", "0.5"), "k_max"),
        (("simulate", "--k-max", "0.5"), "--k-max applies only to the policies oak-paper"),
        (("simulate", "--failure-rate", "1.5"), "--failure-rate 1.5"),
        (("simulate", "--workload", "/no/such.csv"), "no such file"),
        (("simulate", "--restore-cost", "soon"), "--restore-cost 'soon'"),
        (("simulate", "--solver", "cplex"), "--solver"),
        (("compare", "--failure-rates", "0,x"), "'x' is not a number"),
        (("compare", "--seeds", "0"), "--seeds"),
        (("compare", "--failure-rates", "0,nan"), "--failure-rates '0,nan': nan is not a probability"),
        (("compare", "--checkpoint-policy", "bogus"), "--checkpoint-policy 'bogus': expected"),  # not physics …=
        (("simulate", "--horizon", "-5"), "--horizon -5.0: expected a positive number"),
        (("simulate", "--policy", "/tmp:X"), "'/tmp' is a folder; expected a .py file"),
        (("workloads", "show", ""), "workload '': empty; expected"),
        # seeds are mixed modulo 2^64: -1 was the run of 2^64 - 1, 2^64 that of 0, each labelled as typed
        (("simulate", "--seed", "-1"), "--seed -1: expected an integer from 0 to 2^64 - 1"),
        (("simulate", "--seed", str(1 << 64)), "--seed 18446744073709551616: expected an integer from 0 to 2^64"),
        (("simulate", "--cluster", "huge"), "cluster preset"),
        (("simulate", "--policy", "sia", "--alpha", "0.1"), "--alpha applies only to the policies"),
        (("simulate", "--policy", "pollux", "--population", "1"), "population=1"),
        (("compare", "--policies", "oak,sia", "--generations", "5"), "--generations applies only"),
        (("compare", "--failure-rates", "0.1,0.10"), "--failure-rates: duplicate value in '0.1,0.10'"),
        # a name list with a name left out was run without it; a list of floats was refused
        (("compare", "--policies", "oak,"), "--policies 'oak,': an empty name"),
        (("compare", "--policies", "oak,sia,oak"), "--policies 'oak,sia,oak': a name given twice"),
        (("bench", "decision", "--policies", ",sia"), "--policies ',sia': an empty name"),
        (("reproduce", "table2,,fig3-baselines", "--quick"), "experiment 'table2,,fig3-baselines': an empty name"),
        # a mistyped seed count used to fill memory with run specs before anything ran
        (("compare", "--seeds", "1000000000"), "6,000,000,000 runs; at most 100,000 in one sweep"),
        (("reproduce", "fig3-baselines", "--seeds", "1000000000"), "at most 100,000 in one sweep"),
        (("bench", "sweep", "--seeds", "1000000000"), "at most 100,000 in one sweep"),
        # options of the other mode, or of the other backend, were ignored without a word
        (("bench", "decision", "--rounds", "3", "--seeds", "7"), "--seeds: applies to random rounds"),
        (("bench", "decision", "--rounds", "3", "--no-reference"), "--no-reference: applies to random rounds"),
        (("bench", "decision", "--gpus", "8", "--types", "2", "--jobs", "5", "--workload", "x"), "--workload: applies"),
        (
            ("reproduce", "table2", "--quick", "--address", "1.2.3.4:6379"),
            "--address 1.2.3.4:6379: applies to --backend ray",
        ),
    ],
)
def test_bad_input_exits_2_without_traceback(args: tuple[str, ...], message: str) -> None:
    res = oak(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert message in " ".join(res.stderr.split())


def test_bad_workload_file_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "w.csv"
    bad.write_text("name,submit_time_s,application,min_gpus,max_gpus\nj,0,cifar10,1,8\nk,zero,bert,1,8\n")
    res = oak("simulate", "--workload", str(bad))
    assert res.returncode == 2
    assert f"{bad}:3: field 'submit_time_s'" in " ".join(res.stderr.split())


def test_every_physics_option_is_a_flag_of_simulate_and_compare() -> None:
    """The physics flags are generated from PhysicsOptions: one per field, on both commands, passed through."""
    import dataclasses

    from oak.cli.common import physics_flag
    from oak.engine.rules import PhysicsOptions

    for command in ("simulate", "compare"):
        text = " ".join(oak(command, "--help").stdout.split())
        for f in dataclasses.fields(PhysicsOptions):
            flag = "--" + physics_flag(f.name).replace("_", "-")
            assert flag[:18] in text, (command, flag)  # help may cut long flag names


def test_physics_flags_reach_the_run(tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    res = oak("simulate", "--workload", "small", "--policy", "sia", "--horizon", "2000", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["runs"][0]["unfinished_jobs"] > 0  # stopped at the 2,000 s horizon
    res = oak("compare", "--workload", "small", "--policies", "sia", "--seeds", "1", "--restart-on", "sideways")
    assert res.returncode == 2 and "--restart-on 'sideways'" in res.stderr


def test_a_simulation_with_known_goodput_does_not_load_scipy_optimize() -> None:
    """scipy.optimize (~0.4 s to load, most of a small command's start) is imported where a fit or an LP runs,
    not by the command line itself."""
    code = (
        "import sys\n"
        "from oak.cli.main import main\n"
        "sys.argv = ['oak', 'simulate', '--workload', 'small', '--policy', 'sia', '--failure-rate', '0']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('scipy.optimize loaded:', 'scipy.optimize' in sys.modules)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert "mean JCT" in res.stdout and "scipy.optimize loaded: False" in res.stdout, res.stdout[-2000:]


def test_simulate_shows_its_progress_on_stderr() -> None:
    """Off a terminal the bar is drawn once, at the end: every job of the workload finished."""
    res = oak("simulate", "--workload", "small", "--policy", "sia", "--failure-rate", "0.05")
    assert res.returncode == 0, res.stderr
    assert "simulating sia" in res.stderr
    counts = re.findall(r"(\d+)/(\d+)", res.stderr)
    assert counts, res.stderr
    assert tuple(map(int, counts[-1])) == (len(load_workload("small").jobs),) * 2, res.stderr
    # an error the run finds before its first round (jobs that arrive after the horizon) shows no bar
    late = oak("simulate", "--workload", "small", "--horizon", "1")
    assert late.returncode == 2 and "would never arrive" in late.stderr and "simulating" not in late.stderr
