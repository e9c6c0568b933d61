"""A finished run on a read-only file system (an archived run, another user's) can still be read: ``oak status``,
``explain``, ``logs`` and ``export-trace`` only read its state; ``oak serve`` refuses such a folder (exit 2)
before it starts, and refuses a folder that holds an ``oak run`` of a jobs file before it says it serves."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

OAK = [sys.executable, "-m", "oak"]
JOBS = 'jobs:\n  - {name: a, command: [python3, -c, "print(41 + 1)"], min_gpus: 1, max_gpus: 1}\n'


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ro")
    (root / "jobs.yaml").write_text(JOBS)
    out = subprocess.run(
        [*OAK, "run", "jobs.yaml", "--cpu-slots", "1", "--round-seconds", "1", "--run-dir", "run"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return root / "run"


def _in_read_only_mount(run_dir: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) run in a private mount namespace where ``run_dir`` is bind-mounted read-only."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    mount = f"mount --bind {run_dir} {run_dir} && mount -o remount,bind,ro {run_dir}"
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", mount], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {probe.stderr.strip()}")
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", f"{mount} && touch {run_dir}/x 2>/dev/null && exit 9; {script}"],
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_reading_commands_work_on_a_read_only_run_directory(finished_run: Path, tmp_path: Path) -> None:
    py = sys.executable
    trace = tmp_path / "t.json"
    script = " && ".join(
        [
            f"{py} -m oak status --run-dir {finished_run} --json > {tmp_path}/status.json",
            f"{py} -m oak explain --run-dir {finished_run} a > {tmp_path}/explain.txt",
            f"{py} -m oak logs --run-dir {finished_run} a > {tmp_path}/logs.txt",
            f"{py} -m oak export-trace {finished_run} --out {trace}",
            f"{py} -c 'from pathlib import Path; from oak.runtime.store import RunStore; "
            f'print("read_only", RunStore.for_reading(Path("{finished_run}/state.sqlite")).read_only)\'',
        ]
    )
    out = _in_read_only_mount(finished_run, script)
    assert out.returncode != 9, "the bind mount is not read-only"
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "read_only True" in out.stdout
    assert '"done"' in (tmp_path / "status.json").read_text()
    assert "42" in (tmp_path / "logs.txt").read_text()
    assert trace.is_file() and '"a"' in trace.read_text()


def test_serve_refuses_a_read_only_run_directory(finished_run: Path) -> None:
    out = _in_read_only_mount(finished_run, f"{sys.executable} -m oak serve --run-dir {finished_run} --cpu-slots 1")
    assert out.returncode == 2, out.stdout + out.stderr
    text = " ".join(out.stderr.split())  # the console wraps long lines
    assert "cannot create files in" in text and "read-only file system" in text, text
    assert "Traceback" not in text and "oak serve:" not in text, text


def test_serve_refuses_an_oak_run_directory_before_it_says_it_serves(finished_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    out = subprocess.run(
        [*OAK, "serve", "--run-dir", str(run_dir), "--cpu-slots", "1", "--round-seconds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    text = " ".join(out.stderr.split())
    assert "holds an oak run of a jobs file, not a service's run" in text, text
    assert "oak serve:" not in out.stderr and not (run_dir / "oak.sock").exists(), out.stderr
