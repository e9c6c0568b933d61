"""Checks shared by the runtime tests (local and Ray executors)."""

from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path


def steps_in_loss(job_dir: Path) -> set[int]:
    with open(job_dir / "loss.csv", encoding="utf-8") as fh:
        return {int(row["step"]) for row in csv.DictReader(fh)}


def check_done(run_dir: Path, targets: dict[str, int]) -> None:
    for name, target in targets.items():
        job_dir = run_dir / "jobs" / name
        assert (job_dir / "done").is_file(), f"{name} has no done marker"
        status = json.loads((job_dir / "status.json").read_text())
        assert status["step"] == target and status["done"] is True
        assert steps_in_loss(job_dir) == set(range(1, target + 1))


def processes_of(job_dir: Path) -> list[int]:
    """Processes of this machine running under the job contract of ``job_dir`` (its ``OAK_JOB_DIR``): its ranks
    that still run, whichever backend started them."""
    mark = f"OAK_JOB_DIR={job_dir}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if mark in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
    return found
