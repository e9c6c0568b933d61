"""The sweeps' process pool (oak.sim.pool): results, errors, and workers that die — mid-message included."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oak.sim.pool import RemoteTraceback, WorkerDied, WorkerPool


def _square(x: int) -> int:
    return x * x


class _Unpicklable(Exception):
    def __init__(self, lock: object) -> None:
        super().__init__("holds a lock")
        self.lock = lock


def _fail(kind: str) -> int:
    if kind == "value":
        raise ValueError("bad task")
    import threading

    raise _Unpicklable(threading.Lock())


def test_results_come_back_with_their_ids() -> None:
    got: dict[int, int] = {}
    tasks = list(range(7))
    with WorkerPool(2, _square) as pool:
        while tasks or pool.busy:
            while tasks and pool.idle:
                x = tasks.pop()
                pool.submit(x, x)
            got.update(pool.results())
    assert got == {x: x * x for x in range(7)}


def test_a_worker_error_is_raised_here_with_its_traceback() -> None:
    with pytest.raises(ValueError, match="bad task") as info, WorkerPool(1, _fail) as pool:
        pool.submit(0, "value")
        list(pool.results())
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "in _fail" in str(info.value.__cause__)  # the worker's own frames
    with pytest.raises(RuntimeError, match="_Unpicklable: holds a lock"), WorkerPool(1, _fail) as pool:
        pool.submit(0, "lock")
        list(pool.results())


#: A worker stopped half-way through sending a result larger than its pipe holds, then killed. The parent must get
#: an error at once and exit: a reader that held the pipe's other end too (as concurrent.futures' shared result
#: queue does) would wait for the rest of the message for ever.
_KILLED_MID_MESSAGE = """
import os, signal, sys, time
from oak.sim.pool import WorkerDied, WorkerPool

def big(n):
    return b"x" * n

with WorkerPool(1, big) as pool:
    pool.submit(0, 64 << 20)
    time.sleep(1.0)  # the worker fills the pipe and waits for this process to read
    (pid,) = pool.pids
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    try:
        list(pool.results())
    except WorkerDied as exc:
        print("died:", exc)
    else:
        sys.exit("no WorkerDied")
"""


def test_a_worker_killed_mid_message_is_reported_not_waited_for() -> None:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _KILLED_MID_MESSAGE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ended, killed by SIGKILL (kill -9 or the out-of-memory killer), while it ran task 0" in proc.stdout
    assert time.monotonic() - t0 < 30


def test_leaving_by_an_exception_ends_the_workers_at_once() -> None:
    with pytest.raises(KeyboardInterrupt), WorkerPool(2, time.sleep) as pool:
        pool.submit(0, 600.0)
        pids = pool.pids
        raise KeyboardInterrupt
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


_KILLED_PARENT = """
import time
from pathlib import Path
from oak.sim.pool import WorkerPool

with WorkerPool(2, time.sleep) as pool:
    pool.submit(0, 600.0)  # one worker busy for ten minutes, one idle
    print(*pool.pids, flush=True)
    time.sleep(600.0)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_a_killed_parent_leaves_no_worker_running(tmp_path: Path) -> None:
    """SIGKILL of a sweep (the OOM killer, kill -9) ends its workers too: the busy one by the kernel's parent-death
    signal, the idle one as well (or, without that signal, at its next check of its parent)."""
    out = tmp_path / "out"
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-c", _KILLED_PARENT], stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60.0
        while not out.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        pids = [int(x) for x in out.read_text().split()]
        assert all(_running(pid) for pid in pids)
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10.0
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if _running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived their parent"


def test_a_dead_worker_is_one_error_line_naming_its_run(tmp_path: Path) -> None:
    """A worker killed mid-run (here a policy that SIGKILLs its own process, as the OOM killer would) ended
    `oak compare --workers 2` in a traceback; it is now one line naming the run, exit 1."""
    (tmp_path / "plug.py").write_text(
        "import os, signal\nfrom oak import PolicyBase\n\n"
        "class Dies(PolicyBase):\n    name = 'dies'\n\n"
        "    def decide(self, snap):\n        os.kill(os.getpid(), signal.SIGKILL)\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "oak", "compare", "--workload", "small", "--policies", "plug.py:Dies,oak"]
    res = subprocess.run(
        [*cmd, "--seeds", "2", "--failure-rates", "0.1", "--workers", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr
    text = " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr
    assert "ended, killed by SIGKILL (kill -9 or the out-of-memory killer), while it ran plug.py:Dies on small" in text
    assert "at λ = 0.1, seed " in text and "nothing was written" in text


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_every_start_method_runs_the_tasks(method: str) -> None:
    """Under a fork server (Python 3.14's default on Linux) or spawn a worker's parent is not the sweep: the
    workers took that for their parent's death and ended at once."""
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} here")
    got: dict[int, int] = {}
    with WorkerPool(2, abs, start_method=method) as pool:
        tasks = [-3, -4, 5]
        while tasks or pool.busy:
            while tasks and pool.idle:
                x = tasks.pop()
                pool.submit(x, x)
            got.update(pool.results())
    assert got == {-3: 3, -4: 4, 5: 5}


def _fail_to_start() -> None:
    raise RuntimeError("no GPU driver")


def test_an_initializer_error_is_raised_as_itself() -> None:
    """A worker whose initializer raised was reported as a worker dying in the first task (or, submitted to late,
    as a BrokenPipeError)."""
    for wait_s in (0.0, 1.0):
        with pytest.raises(RuntimeError, match="no GPU driver") as info, WorkerPool(1, abs, _fail_to_start) as pool:
            time.sleep(wait_s)  # the second time the worker has ended before the task is sent
            pool.submit(0, -1)
            list(pool.results())
        assert isinstance(info.value.__cause__, RemoteTraceback)


def test_a_worker_killed_while_idle_is_worker_died_on_submit() -> None:
    with WorkerPool(1, abs) as pool:
        (pid,) = pool.pids
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        with pytest.raises(WorkerDied, match="killed by SIGKILL"):
            pool.submit(0, -1)
            list(pool.results())


def test_bench_sweep_names_a_dead_worker_in_one_line(tmp_path: Path) -> None:
    """`oak bench sweep` printed a traceback when a pool worker died (its one-process reference runs first, in
    the command's own process, so the policy here dies only in a worker)."""
    (tmp_path / "plug.py").write_text(
        "import multiprocessing, os, signal\nfrom oak import PolicyBase\nfrom oak.policies.drf import DrfPolicy\n\n"
        "class DiesInAWorker(DrfPolicy):\n    name = 'dies-in-a-worker'\n\n"
        "    def decide(self, snap):\n"
        "        if multiprocessing.parent_process() is not None:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return super().decide(snap)\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "oak", "bench", "sweep", "--workload", "small", "--policies", "plug.py:DiesInAWorker"]
    res = subprocess.run(
        [*cmd, "--seeds", "1", "--failure-rates", "0.1", "--workers", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-3000:]
    text = " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr, res.stderr
    assert "killed by SIGKILL" in text and "while it ran plug.py:DiesInAWorker on small" in text, text
