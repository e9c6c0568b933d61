"""Start ``oak serve`` in a subprocess, as a user would, and wait for its socket."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import IO


def start_server(argv: list[str], run_dir: Path, log: IO[str], timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """Run ``argv`` (an ``oak serve`` command) with stdout and stderr to ``log`` in its own session; returns once
    ``run_dir/oak.sock`` exists (fails with the log if the server exits or the socket is late)."""
    server = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not (run_dir / "oak.sock").exists():
        if time.monotonic() > deadline or server.poll() is not None:
            log.flush()
            raise AssertionError(f"oak serve did not come up: {Path(log.name).read_text()[-3000:]}")
        time.sleep(0.1)
    return server
