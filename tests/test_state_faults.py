"""Faults of the state database under `oak run` / `oak serve` (issue [hardening], row 9 and item 3): a
write-ahead log deleted under a running scheduler loses nothing; a run directory whose state is gone is not
silently begun again, and the old run's ranks are found and stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oak.errors import OakInputError
from oak.policies import make_policy
from oak.runtime.jobs_file import parse_jobs
from oak.runtime.scheduler import RUN_MARKER, RuntimeOptions, RuntimeScheduler, ranks_under
from oak.runtime.store import JobRecord, RunStore

CRASH_AFTER_WAL_LOSS = """
import os, sys
from pathlib import Path
from oak.runtime.store import JobRecord, RunStore
store = RunStore(Path(sys.argv[1]))
store.save([JobRecord("a", step=1)], {"fingerprint": "x"})
os.unlink(sys.argv[1] + "-wal")  # deleted under the running scheduler
store.save([JobRecord("a", step=2), JobRecord("b", step=7)])
store.save([JobRecord("c", step=3)])
os._exit(9)  # a crash: no close, no checkpoint on the way out
"""


def test_a_deleted_wal_loses_no_committed_state(tmp_path: Path) -> None:
    """Row 9, first half: with state.sqlite-wal deleted while the scheduler ran, a crash lost every acknowledged
    job and the run's identity (a new run began silently). Now the next commit checkpoints the deleted log's
    content into the database and opens a new one: after the crash everything committed is there."""
    db = tmp_path / "state.sqlite"
    res = subprocess.run([sys.executable, "-c", CRASH_AFTER_WAL_LOSS, str(db)], capture_output=True, timeout=60)
    assert res.returncode == 9, res.stderr
    store = RunStore(db)
    assert store.meta() == {"fingerprint": "x"}
    assert {n: r.step for n, r in store.jobs().items()} == {"a": 2, "b": 7, "c": 3}


def test_the_wal_is_recreated_with_private_modes(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "state.sqlite")
    store.save([JobRecord("a")])
    wal = store.sidecars()[0]
    wal.unlink()
    store.save([JobRecord("b")])
    assert store.wal_recovered == 1 and wal.exists() and (wal.stat().st_mode & 0o777) == 0o600
    store.save([JobRecord("c")])
    assert store.wal_recovered == 1


RANK = """
import time
while True:
    time.sleep(0.1)
"""

ONE_JOB = "jobs:\n  - {name: a, model: tiny, target_steps: 10, max_gpus: 1, batch_size: 8}\n"


def _rank_of(run_dir: Path, name: str) -> subprocess.Popen[bytes]:
    """A process that looks like a rank of job ``name`` of the run in ``run_dir`` (its OAK_JOB_DIR)."""
    env = {**os.environ, "OAK_JOB_DIR": str(run_dir / "jobs" / name)}
    return subprocess.Popen([sys.executable, "-c", RANK], env=env, start_new_session=True)


def test_a_run_directory_whose_state_is_gone_is_not_begun_again(tmp_path: Path) -> None:
    """Row 9, second half, and item 3: the database and its WAL deleted while no scheduler ran (or replaced by an
    empty one): the same command began a new run silently over the old one, whose orphan rank kept running. Now
    it refuses with what happened and what to do, and stops that rank first."""
    run_dir = tmp_path / "run"
    opts = RuntimeOptions(devices=1, stop_timeout_s=5.0)
    jobs = parse_jobs(ONE_JOB, "jobs.yaml")
    sched = RuntimeScheduler(jobs, make_policy("oak"), run_dir, opts)
    sched._open()  # the run begins: state committed, marker written
    assert (run_dir / RUN_MARKER).is_file()
    sched.store.close()
    (run_dir / "jobs" / "a").mkdir(parents=True)
    for f in ("state.sqlite", "state.sqlite-wal", "state.sqlite-shm"):
        (run_dir / f).unlink(missing_ok=True)
    orphan = _rank_of(run_dir, "a")
    stranger = _rank_of(tmp_path / "other-run", "a")  # another run's rank: not touched
    try:
        deadline = time.monotonic() + 30
        while orphan.pid not in ranks_under(run_dir / "jobs"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        again = RuntimeScheduler(jobs, make_policy("oak"), run_dir, opts)
        with pytest.raises(OakInputError) as err:
            again._open()
        text = str(err.value)
        assert "left no state" in text and "state.sqlite-wal" in text and "Nothing was started" in text
        assert "1 rank process(es) of that run were still running and were stopped" in text
        assert "1 job folder(s)" in text and "new --run-dir" in text
        orphan.wait(timeout=10)  # (the scheduler may have reaped it: its status is then unknown here)
        assert not Path(f"/proc/{orphan.pid}").exists()
        assert stranger.poll() is None
        assert again.store.meta() == {}  # nothing begun
    finally:
        for p in (orphan, stranger):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_a_resumed_run_stops_ranks_its_records_do_not_name(tmp_path: Path) -> None:
    """A rank launched after the last commit (not in any record) is an orphan too: found through /proc."""
    run_dir = tmp_path / "run"
    opts = RuntimeOptions(devices=1, stop_timeout_s=5.0)
    jobs = parse_jobs(ONE_JOB, "jobs.yaml")
    RuntimeScheduler(jobs, make_policy("oak"), run_dir, opts)._open()
    orphan = _rank_of(run_dir, "a")
    try:
        deadline = time.monotonic() + 30
        while orphan.pid not in ranks_under(run_dir / "jobs"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        records, _ = RuntimeScheduler(jobs, make_policy("oak"), run_dir, opts)._open()
        orphan.wait(timeout=10)
        assert not Path(f"/proc/{orphan.pid}").exists()
        assert [r.name for r in records] == ["a"]
    finally:
        if orphan.poll() is None:
            orphan.kill()
        orphan.wait()


def test_the_marker_says_when_the_run_began(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    sched = RuntimeScheduler(parse_jobs(ONE_JOB, "j.yaml"), make_policy("oak"), run_dir, RuntimeOptions(devices=1))
    _, start = sched._open()
    marker = json.loads((run_dir / RUN_MARKER).read_text())
    assert marker["start_wall"] == start and (run_dir / RUN_MARKER).stat().st_mode & 0o777 == 0o600
