"""`oak reproduce all --quick` end to end: what CI runs, with every section and figure of the report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from oak.reproduce.experiments import EXPERIMENTS


def test_reproduce_all_quick(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    cmd = [
        sys.executable,
        "-c",
        "from oak.cli.main import main; main()",
        "reproduce",
        "all",
        "--quick",
        "--out",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    report = (out / "report.md").read_text(encoding="utf-8")
    for exp in EXPERIMENTS.values():
        assert exp.title in report, exp.name
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert len(figures) >= 7
    for name in figures:
        assert f"figures/{name}" in report
    assert (out / "report.html").stat().st_size > 10_000
    # Resuming: a second invocation finds every run stored and simulates nothing.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0
    assert "running 0 on the local backend" in " ".join(again.stdout.split())


def test_reproduce_rejects_unknown_experiment(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from oak.cli.main import main; main()", "reproduce", "table9", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2
    assert "experiment 'table9' is unknown" in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr
