"""``scripts/gpu-smoke --cpu``: the GPU smoke test's own logic, run on CPU worker slots (no GPU needed).

On a GPU machine the same script runs on the GPUs (docs/runtime.md); here it must pass on CPU: kill/resume
bit-exact at W = 1 and 2, and ``oak run`` finishing every job under injected failures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-smoke"


@pytest.mark.long
def test_gpu_smoke_passes_on_cpu_slots() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--steps", "36", "--run-scale", "0.4", "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    verdict = [line for line in out.splitlines() if line.startswith("gpu-smoke: ")]
    assert len(verdict) == 1 and verdict[0].startswith("gpu-smoke: PASS — 3/3 checks"), out
    assert out.count("bit-identical to the uninterrupted run") == 2, out
    kills = [(int(a), int(b)) for a, b in re.findall(r"SIGKILL at step (\d+), resumed from (\d+)", out)]
    assert len(kills) == 2 and all(at >= 21 and resumed < at and resumed % 6 == 0 for at, resumed in kills), kills
