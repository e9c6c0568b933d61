"""`oak reproduce all --quick` end to end: what CI runs, with every section and figure of the report."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from oak.reproduce.experiments import EXPERIMENTS
from support.cli import oak


def _reproduce(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from oak.cli.main import main; main()", "reproduce", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.long
def test_reproduce_all_quick_then_both_rule_sets_into_one_store(tmp_path: Path) -> None:
    """``all --quick`` with every section and figure of the report; the product's study with a trace;
    ``--rules sia-artifact --failure-restarts 2`` into the same store, its report showing the claims under the rule
    sets stored with the same other options only; a rerun resumes (simulates nothing)."""
    out = tmp_path / "quick"

    def header() -> str:
        report = (out / "report.md").read_text(encoding="utf-8")
        return next(
            line for line in report.splitlines() if line.startswith("| id | paper's claim | ") and "rules" in line
        )

    res = _reproduce("all", "--quick", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "report.md").read_text(encoding="utf-8")
    for exp in EXPERIMENTS.values():
        assert (exp.title in report) == exp.in_all, exp.name  # `all` is the paper's experiments
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert len(figures) >= 7
    for name in figures:
        assert f"figures/{name}" in report
    assert (out / "report.html").stat().st_size > 10_000
    assert "default rules, “Sia” = sia-paper" in header() and "sia-artifact" not in header()

    # The product's study, with a Sia-format trace on sia-64, into the same store: it reuses the paper's runs it
    # shares (same key) and simulates only its own
    traces = tmp_path / "traces"
    traces.mkdir()
    rows = [f"j{i},{60 * i},{'cifar10' if i % 2 else 'bert'},{1 + i % 4},{128 if i % 2 else 24}" for i in range(8)]
    (traces / "t1.csv").write_text("name,time,application,num_replicas,batch_size\n" + "\n".join(rows) + "\n")
    res = _reproduce("restart-aware", "--quick", "--traces", str(traces), "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    stored = re.search(r"(\d+) already stored", " ".join(res.stdout.split()))
    assert stored is not None and int(stored.group(1)) > 0, res.stdout
    report = (out / "report.md").read_text(encoding="utf-8")
    assert EXPERIMENTS["restart-aware"].title in report
    assert "goal checks met" in report and "| t1.csv | 0.1 |" in report
    assert "figures/restart-aware.png" in report

    # the Sia artifact's rules with a failure adding 2, from the command line into the same store: the default runs
    # (a failure adding 1) are not comparable, so the claims show the artifact's rules only (every combination of
    # rule sets and readings: tests/test_report.py)
    res = _reproduce(
        "table3-ablation", "--quick", "--rules", "sia-artifact", "--failure-restarts", "2", "--out", str(out)
    )
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "simulator rules: sia-artifact" in report and "a failure adds 2 to a job's restart count" in report
    assert "sia-artifact rules" in header() and "default rules" not in header()
    # Resuming, two experiments at once: every run is stored, nothing is simulated
    both = _reproduce("table2,table3-ablation", "--quick", "--out", str(out))
    assert both.returncode == 0, both.stderr[-3000:]
    assert "running 0 on the local backend" in " ".join(both.stdout.split())
    report = (out / "report.md").read_text(encoding="utf-8")
    assert EXPERIMENTS["table2"].title in report and EXPERIMENTS["table3-ablation"].title in report
    assert "default rules, “Sia” = sia-paper" in header() and "sia-artifact" not in header()
    unknown = _reproduce("table2,table9", "--out", str(out))
    assert unknown.returncode == 2 and "experiment 'table9' is unknown" in " ".join(unknown.stderr.split())
    bad = _reproduce("table2", "--rules", "sia", "--out", str(out))
    assert bad.returncode == 2 and "--rules 'sia'" in bad.stderr and "Traceback" not in bad.stderr
    bad = _reproduce("table2", "--goodput", "oracle", "--out", str(out))
    assert bad.returncode == 2 and "--goodput 'oracle'" in bad.stderr and "Traceback" not in bad.stderr


def test_reproduce_rejects_unknown_experiment(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from oak.cli.main import main; main()", "reproduce", "table9", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2
    assert "experiment 'table9' is unknown" in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr


def test_the_list_names_every_experiment_with_its_paper_reference_verbatim() -> None:
    """Square brackets in a reference (an issue tag) are printed, not taken for console markup."""
    res = oak("reproduce", "--list")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for exp in EXPERIMENTS.values():
        assert any(line.startswith(exp.name) and exp.paper_ref in line for line in lines), exp.name
    assert any("[" in exp.paper_ref for exp in EXPERIMENTS.values())


def test_restart_aware_traces_errors(tmp_path: Path) -> None:
    res = _reproduce("table2", "--traces", str(tmp_path), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "--traces applies only to the experiment restart-aware" in res.stderr
    res = _reproduce("restart-aware", "--traces", str(tmp_path), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "no *.csv trace" in res.stderr
    (tmp_path / "bad.csv").write_text("name,time,application,num_replicas,batch_size\nj,1e308,cifar10,1,8\n")
    res = _reproduce("restart-aware", "--traces", str(tmp_path), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "bad.csv:2" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scale", "full"], "--scale applies only to the experiment table4"),
        (["--cpu-slots", "0"], "--cpu-slots applies only to the experiment table4"),
        (["--gpus", "banana"], "--gpus applies only to the experiment table4"),
        (["--quick", "--paper-seeds"], "--quick and --paper-seeds: give one or the other"),
        (["--backend", "slurm"], "--backend 'slurm': expected one of local, ray"),
    ],
)
def test_options_a_simulated_experiment_would_ignore_are_refused_before_anything(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """table4's options on a simulated experiment were ignored without a word, --quick --paper-seeds ran one
    of the two, and an unknown backend was refused only after 'running N on the slurm backend' and an --out
    folder made: each is now an error before anything is written."""
    from typer.testing import CliRunner

    from oak.cli.main import app

    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["reproduce", "fig3-baselines", "--out", str(out), *args])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()) and "running" not in res.output, res.output
    assert not out.exists()
