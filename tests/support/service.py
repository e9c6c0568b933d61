"""Start ``oak serve`` in a subprocess, as a user would, and wait for its socket; or in-process, on a thread."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

#: a command job (YAML list; format with py=sys.executable) that reports its one step and ends
ONE_STEP = '[{py}, -c, "import oak.job; oak.job.report(1, total_steps=1)"]'


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


@contextlib.contextmanager
def in_process_service(run_dir: Path, policy: Any, devices: int, **opts: Any) -> Iterator[threading.Thread]:
    """An in-process ``oak serve`` on ``run_dir`` (0.5 s rounds; ``opts``: other RuntimeOptions) with its Unix
    socket; yields its thread."""
    from oak.runtime.scheduler import RuntimeOptions
    from oak.service.protocol import Listeners
    from oak.service.scheduler import Service

    sched = Service(policy, run_dir, RuntimeOptions(devices=devices, round_s=0.5, tick_s=0.05, **opts))
    listeners = Listeners(run_dir, sched.request, None)
    thread = threading.Thread(target=sched.run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        sched.stop()
        thread.join(60)
        listeners.close()
