"""The suite's ``xdist_group`` marks do what they say: under ``--dist loadgroup`` every test of a group runs on one
pytest-xdist worker. Tests sharing a Ray or SLURM cluster, and modules whose module-scoped fixtures are expensive,
rely on it; with pytest 9.2 and pytest-xdist 3.8 grouping silently stopped (the fixtures were built once per
worker, the clusters shared between workers), which only this test would notice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SAMPLE = """
import os

import pytest

pytestmark = pytest.mark.xdist_group("module")


def _seen(group, i):
    out = os.path.join(os.environ["OAK_XDIST_SEEN"], f"{group}-{i}")
    with open(out, "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.parametrize("i", range(6))
def test_in_module_group(i):
    _seen("module", i)


@pytest.mark.xdist_group("cluster")
@pytest.mark.parametrize("i", range(6))
def test_in_named_group(i):
    _seen("cluster", i)
"""


def test_loadgroup_keeps_each_group_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    seen_dir = tmp_path / "seen"
    seen_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"} | {"OAK_XDIST_SEEN": str(seen_dir)}
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"]
    res = subprocess.run(
        [*cmd, "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    seen = {p.name: p.read_text(encoding="utf-8") for p in seen_dir.iterdir()}
    assert len(seen) == 12 and all(w.startswith("gw") for w in seen.values()), seen
    groups: dict[str, set[str]] = {}
    for name, worker in seen.items():
        groups.setdefault(name.split("-")[0], set()).add(worker)
    assert sorted(groups) == ["cluster", "module"], seen
    assert all(len(workers) == 1 for workers in groups.values()), groups
