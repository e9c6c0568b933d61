"""File modes of a run directory (issue [hardening], row 3 and item 2): private whatever its earlier mode and the
umask."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from support.service import ONE_STEP
from support.service import in_process_service as _service


def test_the_run_directory_is_private_whatever_its_mode_and_the_umask(tmp_path: Path) -> None:
    """Row 3: a run dir that existed with mode 0755, a 022 umask, a job submitted with a secret in its
    environment: state.sqlite-wal and -shm were 0644, and another uid read the secret from the WAL. Now the run
    dir is 0700 and the database, its WAL and SHM, metrics.prom and rounds.jsonl are 0600."""
    import os
    import stat

    from oak.policies import make_policy
    from oak.service.protocol import call

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    run_dir.chmod(0o755)
    files = ["state.sqlite", "state.sqlite-wal", "state.sqlite-shm", "metrics.prom", "rounds.jsonl"]
    old = os.umask(0o022)
    try:
        with _service(run_dir, make_policy("oak"), 1):
            cmd = ONE_STEP.format(py=sys.executable)
            job = f"jobs:\n  - {{name: a, command: {cmd}, env: {{WANDB_API_KEY: s3cret}}}}\n"
            assert call(run_dir, "submit", text=job, source="a.yaml")["ok"]
            deadline = time.monotonic() + 60
            while call(run_dir, "status")["jobs"][0]["state"] != "done":
                assert time.monotonic() < deadline
                time.sleep(0.2)
            time.sleep(1.2)  # metrics.prom is rewritten every second
            modes = {f: stat.S_IMODE((run_dir / f).stat().st_mode) for f in files}
    finally:
        os.umask(old)
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert modes == dict.fromkeys(files, 0o600), {f: oct(m) for f, m in modes.items()}
