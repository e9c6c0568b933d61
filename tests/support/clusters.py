"""Whether a local cluster a test module needs is up: the reason to skip it, or None."""

from __future__ import annotations

import subprocess
from pathlib import Path


def not_running(script: Path, what: str) -> str | None:
    """Why ``script status`` (``scripts/local-slurm``, ``scripts/local-cluster``) says ``what`` is not running,
    or None when it answers that it is."""
    try:
        res = subprocess.run([str(script), "status"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{script.parent.name}/{script.name} status did not answer: {exc}"
    if res.returncode != 0:
        return f"{what} does not run ({(res.stdout + res.stderr).strip()})"
    return None
