"""Output paths: a path a command could not write is refused before any work (exit 2, the option named), and a
write lands where the path points — through a symbolic link, into a device or pipe in place — never replacing
the link or the device node."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oak.cli.main import app
from oak.io_util import (
    AtomicParquetWriter,
    output_dir_problem,
    output_file_problem,
    write_bytes_atomic,
    write_target,
)

#: every command option that names a file to write, as (arguments before the path, option)
FILE_OPTIONS = [
    (["simulate", "--workload", "small"], "--json"),
    (["simulate", "--workload", "small"], "--trace-jobs"),
    (["simulate", "--workload", "small"], "--trace-plot"),
    (["compare", "--workload", "small", "--policies", "oak,sia", "--seeds", "1"], "--json"),
    (["bench", "sim", "--reference", "none"], "--json"),
    (["bench", "decision", "--rounds", "2"], "--json"),
    (["workloads", "synth", "--jobs", "4", "--cluster", "paper-12"], "--out"),
    (["catalog", "build", "no-such-profiles"], "--out"),
    (["export-trace", "no-such-run"], "--out"),
    (["export-trace", "no-such-run", "--out", "t.json"], "--failures"),
    (["run", "no-such-jobs.yaml", "--cpu-slots", "1"], "--json"),
    (["replay", "no-such-run"], "--json"),
]


def _invoke(args: list[str], cwd: Path) -> tuple[int, str]:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(app, args)
    finally:
        os.chdir(old)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, " ".join(res.output.split())  # the console wraps long lines


@pytest.mark.parametrize(("args", "option"), FILE_OPTIONS, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_directory_or_a_file_in_the_way_is_refused_before_any_work(
    tmp_path: Path, args: list[str], option: str
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    code, out = _invoke([*args, option, str(folder)], tmp_path)
    assert code == 2, out
    assert f"error: {option} {folder}: is a directory; expected a file name" in out
    assert "JCT" not in out and "Traceback" not in out  # nothing was run
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, out = _invoke([*args, option, str(blocker / "sub" / "x.out")], tmp_path)
    assert code == 2, out
    assert f"{blocker} is a file, not a directory" in out
    assert blocker.read_text() == "x"


def test_run_directories_and_the_reproduce_folder_must_be_folders(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for args in (["run", "jobs.yaml", "--cpu-slots", "1", "--run-dir"], ["reproduce", "fig3-baselines", "--out"]):
        code, out = _invoke([*args, str(blocker)], tmp_path)
        assert code == 2, out
        assert f"{blocker}: is a file; expected a folder" in out
        code, out = _invoke([*args, str(blocker / "sub")], tmp_path)
        assert code == 2, out
        assert f"{blocker} is a file, not a directory" in out


def test_missing_parent_folders_are_created(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "run.json"
    assert output_file_problem(out) is None
    code, text = _invoke(["simulate", "--workload", "small", "--json", str(out)], tmp_path)
    assert code == 0, text
    assert out.is_file()
    assert output_dir_problem(tmp_path / "c" / "d") is None


def test_no_permission_is_said_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    denied = tmp_path / "ro"
    denied.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == denied else real_access(p, mode))
    want = f"cannot create files in {denied} (no write permission or a read-only file system)"
    assert output_file_problem(denied / "x" / "run.json") == want
    assert output_dir_problem(denied / "results") == want
    code, out = _invoke(["simulate", "--workload", "small", "--json", str(denied / "run.json")], tmp_path)
    assert code == 2 and want in out, out


def test_a_symbolic_link_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_bytes_atomic(link, b"new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]  # no temporary left


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as fh:
            into.append(fh.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def test_a_pipe_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert write_target(fifo) == (fifo, False)
    got: list[bytes] = []
    reader = _read_fifo(fifo, got)
    write_bytes_atomic(fifo, b"through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    # a Parquet table streamed into a pipe (Arrow's own file would seek): readable as written
    schema = (("t", pa.float64()), ("name", pa.string()))
    got.clear()
    reader = _read_fifo(fifo, got)
    with AtomicParquetWriter(fifo, schema, batch_rows=2) as w:
        w.append({"t": [0.5, 1.5, 2.5], "name": ("a", "b", "c")})
    reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    table = pq.read_table(pa.BufferReader(got[0]))
    assert table.to_pydict() == {"t": [0.5, 1.5, 2.5], "name": ["a", "b", "c"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_dev_and_proc_paths_are_written_in_place() -> None:
    # /dev/stdout resolves to whatever the shell redirected it to: a rename there would replace that file
    assert write_target("/dev/stdout") == (Path("/dev/stdout"), False)
    assert write_target("/dev/null") == (Path("/dev/null"), False)
    assert output_file_problem("/dev") == "is a directory; expected a file name"
