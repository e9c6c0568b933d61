"""An output option never overwrites an input of the same command, nor another output (each case ran and
replaced the file with no word)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from oak.cli.main import app

WORKLOAD = "name,submit_time_s,application,min_gpus,max_gpus\nj1,0,cifar10,1,8\n"
FAILURE_LOG = "time_s,job,node,kind,down_s\n100,j1,,crash,\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "--workload", "w.csv", "--json", "w.csv"], "--json w.csv: that is the --workload input"),
        (["simulate", "--workload", "w.csv", "--trace-jobs", "./w.csv"], "that is the --workload input"),
        (["simulate", "--workload", "small", "--json", "o", "--trace-jobs", "o"], "--json and --trace-jobs name"),
        (["compare", "--workload", "w.csv", "--json", "w.csv", "--seeds", "1"], "that is the --workload input"),
        (["workloads", "synth", "--jobs", "3", "--trace", "t.csv", "--out", "t.csv"], "--out t.csv: that is the"),
        (
            ["simulate", "--workload", "w.csv", "--failure-model", "trace:f.csv", "--json", "f.csv"],
            "--failure-model input",
        ),
    ],
)
def test_an_output_naming_an_input_or_another_output_is_refused(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.csv").write_text(WORKLOAD)
    (tmp_path / "t.csv").write_text("raw trace\n")
    (tmp_path / "f.csv").write_text(FAILURE_LOG)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert (tmp_path / "w.csv").read_text() == WORKLOAD and (tmp_path / "t.csv").read_text() == "raw trace\n"
    assert (tmp_path / "f.csv").read_text() == FAILURE_LOG
    assert not (tmp_path / "o").exists()


def test_outputs_that_overwrite_nothing_are_not_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two outputs to /dev/null replace no file; a folder named like an embedded workload is not the workload."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "out.json").write_text("{}")
    for args in (
        ["simulate", "--workload", "small", "--json", "/dev/null", "--trace-plot", "/dev/null"],
        ["simulate", "--workload", "small", "--json", "small/out.json"],
    ):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, (args, res.output)


def test_distinct_outputs_are_written(tmp_path: Path) -> None:
    (tmp_path / "w.csv").write_text(WORKLOAD)
    out = [str(tmp_path / n) for n in ("run.json", "trace.parquet")]
    res = CliRunner().invoke(
        app, ["simulate", "--workload", str(tmp_path / "w.csv"), "--json", out[0], "--trace-jobs", out[1]]
    )
    assert res.exit_code == 0, res.output
    assert all(Path(p).stat().st_size > 0 for p in out)


def test_compare_labels_its_unfinished_count_as_a_total(tmp_path: Path) -> None:
    """The other columns are means over the seeds; the unfinished count is over all the seeds' runs (the table
    said "unfinished 8" for a 4-job workload under "mean over 2 paired seeds")."""
    import json

    out = tmp_path / "c.json"
    args = ["compare", "--workload", "small", "--policies", "sia", "--failure-rates", "0", "--seeds", "2"]
    res = CliRunner().invoke(app, [*args, "--horizon", "2000", "--workers", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    (row,) = doc["summary"]
    assert row["unfinished_jobs"] == sum(r["unfinished_jobs"] for r in doc["runs"]) > 4
    assert "unfinished (all seeds)" in res.output


def test_export_trace_of_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_text("{}")
    res = CliRunner().invoke(app, ["export-trace", str(f), "--out", str(tmp_path / "t.json")])
    assert res.exit_code == 2 and "a file; expected a run directory" in " ".join(res.output.split()), res.output


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_results_store_that_cannot_be_created_is_an_input_error() -> None:
    """/proc passes the permission checks (root may write there) yet refuses mkdir: a traceback before."""
    res = CliRunner().invoke(app, ["reproduce", "table2", "--quick", "--out", "/proc/oak-no-such-store"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())  # root passes the permission check and meets mkdir's error
    assert "--out /proc/oak-no-such-store: cannot create" in text and "Traceback" not in text, text
