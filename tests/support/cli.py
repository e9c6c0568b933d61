"""Run the ``oak`` command in a subprocess (the console entry point, as a user would)."""

from __future__ import annotations

import subprocess
import sys


def oak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from oak.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
