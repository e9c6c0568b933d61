"""The package as a user installs it (issue [front-page], item 3): the wheel built from this tree, installed
(not editable) into a new virtual environment, runs ``oak compare`` from a folder outside the repository — the
check that everything the product reads at run time (catalog, workloads, the Philly summary) is in the wheel —
and reports the version the source declares."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.long
def test_the_wheel_installs_into_a_new_environment_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel = next(dist.glob("oak_scheduler-*.whl"))
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # A new environment that sees this interpreter's packages (numpy, scipy, ... — installing them again from an
    # index would test the index, not the wheel) but gets oak only from the wheel, not from the source tree.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OAK_RUN_DIR")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(py), *args], cwd=elsewhere, env=clean, capture_output=True, text=True, timeout=600, check=False
        )

    where = run("-c", "import oak; print(oak.__file__, oak.__version__)")
    assert where.returncode == 0, where.stderr
    path, version = where.stdout.split()
    assert path.startswith(str(env_dir)), f"oak came from {path}, not from the wheel"
    from oak import __version__

    assert version == __version__ and wheel.name.startswith(f"oak_scheduler-{__version__}-")
    oak = env_dir / "bin" / "oak"
    assert subprocess.run([str(oak), "--version"], capture_output=True, text=True, check=False).stdout.strip() == (
        f"oak {__version__}"
    )
    out = run("-m", "oak", "compare", "--workload", "small", "--policies", "oak,sia", "--failure-rates", "0",
              "--seeds", "1", "--json", "c.json")  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert (elsewhere / "c.json").stat().st_size > 0 and "mean JCT" in out.stdout
    synth = run("-m", "oak", "workloads", "synth", "--jobs", "20", "--seed", "1", "--out", "p.csv")  # Philly summary
    assert synth.returncode == 0, synth.stderr[-2000:]
    assert len((elsewhere / "p.csv").read_text().splitlines()) > 20
