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


def start_server(
    argv: list[str], run_dir: Path, log: IO[str], timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Run ``argv`` (an ``oak serve`` command; ``env``: its environment) with stdout and stderr to ``log`` in its
    own session; returns once ``run_dir/oak.sock`` exists (fails with the log if the server exits or the socket
    is late)."""
    server = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, env=env)
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


@contextlib.contextmanager
def ray_head(slots: int) -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray cluster as an operator starts one, ``ray start --head`` (``--block``: it ends with this process),
    on a free port of 127.0.0.1 with ``slots`` CPU slots (``oak_slot``), token authentication on (a token of
    its own) and its own temporary directory; yields its address and the environment a client needs."""
    import os
    import secrets
    import shutil
    import signal
    import socket
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="oakray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    argv = ["ray", "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1"]
    argv += [f"--num-cpus={slots}", f'--resources={{"oak_slot": {slots}}}', "--include-dashboard=false"]
    argv += [f"--temp-dir={temp}", "--disable-usage-stats"]
    with open(Path(temp) / "head.log", "w") as log:
        head = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:  # up once a client could connect: the GCS port answers
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
                break
            if head.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"ray start --head did not come up: {(Path(temp) / 'head.log').read_text()[-3000:]}"
                )
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", env
    finally:
        head.send_signal(signal.SIGTERM)  # --block: stops every process of the cluster
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(10)
        shutil.rmtree(temp, ignore_errors=True)
