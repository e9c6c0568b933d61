"""Rank processes seen from outside: identity, liveness, exit statuses — what lets a restarted scheduler adopt
the ranks an earlier scheduler of its run started instead of stopping them.

A rank process of a local incarnation is the caller's child only for the scheduler that started it. After that
scheduler dies the ranks run on (each leads its own session); a new scheduler finds them by their recorded pids,
checks through ``/proc`` that each still is a rank of its job (``is_rank_of``: a packaged worker whose command
line names the job's directory, or a command with the job's ``OAK_JOB_DIR``), and follows them as
:class:`AdoptedProc`. The exit status of a process that is not one's child cannot be waited for, so every rank
leaves it in its job directory when it exits on its own terms (``rank<r>.exit``: the packaged worker writes it
itself, a command's rank through :mod:`oak.runtime.rank_exit`); a rank gone without one was killed (SIGKILL).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from oak.io_util import write_atomic

EXIT_SUFFIX = ".exit"


def exit_file(job_dir: str | Path, rank: int) -> Path:
    """``JOB_DIR/rank<r>.exit``: the exit status rank ``rank`` of the job's current incarnation left."""
    return Path(job_dir) / f"rank{rank}{EXIT_SUFFIX}"


def clear_exit_files(job_dir: str | Path) -> None:
    """Remove every rank's exit status (before an incarnation starts: what is there afterwards is its own)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(job_dir):
            if name.startswith("rank") and name.endswith(EXIT_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(Path(job_dir) / name)


def write_exit_status(job_dir: str | Path, rank: int, pid: int, code: int) -> None:
    """Record that process ``pid`` (rank ``rank``) exited with ``code`` (negative: ended by that signal)."""
    write_atomic(exit_file(job_dir, rank), json.dumps({"pid": pid, "code": code}) + "\n", mode=0o600)


def read_exit_status(job_dir: str | Path, rank: int, pid: int) -> int | None:
    """The exit status process ``pid`` left as rank ``rank``, or None (none, unreadable, another process's)."""
    try:
        obj = json.loads(exit_file(job_dir, rank).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict) or obj.get("pid") != pid or not isinstance(obj.get("code"), int):
        return None
    return int(obj["code"])


def gone(pid: int) -> bool:
    """The process has exited (a zombie left unreaped by its new parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].startswith("Z")


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` s for ``pid`` to exit (reaping it if it is the caller's child); True if it has."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if gone(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _absolute(path: bytes, pid: int | str) -> set[bytes]:
    """Where a path a rank was given may point: itself if absolute; a relative one (an older scheduler gave
    ranks a relative ``--run-dir`` as it was typed) against this process's working directory (a restarted
    scheduler runs where the first ran) and against the rank's own."""
    if path.startswith(b"/"):
        return {os.path.normpath(path)}
    out = set()
    for base in (os.getcwdb, lambda: os.readlink(f"/proc/{pid}/cwd").encode()):
        with contextlib.suppress(OSError):
            out.add(os.path.normpath(os.path.join(base(), path)))
    return out


def _job_dirs(pid: int | str) -> tuple[set[bytes], set[bytes]]:
    """The absolute job directories ``pid`` names: as a packaged worker (in its command line) and as a command
    job (``OAK_JOB_DIR``). Raises OSError where /proc cannot be read."""
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    named = set().union(*(_absolute(a, pid) for a in cmd if a)) if b"oak.runtime.worker" in cmd else set()
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    given = [v[len(b"OAK_JOB_DIR=") :] for v in env if v.startswith(b"OAK_JOB_DIR=")]
    return named, set().union(*(_absolute(v, pid) for v in given if v))


def is_rank_of(pid: int, job_dir: str | Path) -> bool:
    """Whether ``pid`` is a rank process of the job in ``job_dir`` (read from /proc; False if unreadable)."""
    key = os.path.normpath(os.path.abspath(str(job_dir))).encode()
    try:
        named, given = _job_dirs(pid)
    except OSError:
        return False
    return key in named or key in given


def ranks_under(jobs_dir: Path) -> list[int]:
    """Pids of live rank processes of any job in ``jobs_dir`` (``RUN_DIR/jobs``): packaged workers whose command
    line names a job directory in it, and commands whose ``OAK_JOB_DIR`` is one (read from /proc; processes of
    other users are unreadable and skipped)."""
    prefix = (os.path.normpath(os.path.abspath(str(jobs_dir))) + os.sep).encode()
    out = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                named, given = _job_dirs(entry.name)
            except OSError:
                continue
            if any(d.startswith(prefix) for d in named | given) and not gone(int(entry.name)):
                out.append(int(entry.name))
    return sorted(out)


class RankProc(Protocol):
    """One rank process as a handle uses it: a ``subprocess.Popen`` of its own, or an :class:`AdoptedProc`."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


class AdoptedProc:
    """A rank process started by an earlier scheduler, followed by pid (the subset of ``subprocess.Popen`` that
    :class:`~oak.runtime.launch.WorkerHandle` uses). Its exit status is the one it left in its job directory;
    gone without one, it was killed: ``-SIGKILL``."""

    def __init__(self, pid: int, job_dir: str | Path, rank: int) -> None:
        self.pid = pid
        self.job_dir = Path(job_dir)
        self.rank = rank
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and gone(self.pid):
            code = read_exit_status(self.job_dir, self.rank, self.pid)
            self.returncode = -signal.SIGKILL if code is None else code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        wait_gone(self.pid, 1e9 if timeout is None else timeout)
        return self.poll()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def adoptable(pids: list[int], job_dir: str | Path) -> bool:
    """Whether every one of ``pids`` is alive and a rank of the job in ``job_dir``: an incarnation to adopt."""
    return bool(pids) and all(not gone(p) and is_rank_of(p, job_dir) for p in pids)


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> Callable[[], None] | None:
    """A ``preexec_fn`` for a rank the backend must not outlive (a Ray actor's, a SLURM supervisor's): the child
    gets SIGKILL when the thread that started it dies (Linux ``PR_SET_PDEATHSIG``; None elsewhere).
    ``parent_pid``: the starting process (default: the caller); a child whose parent died before ``prctl`` took
    effect exits at once. libc is loaded here, before the fork: nothing to import or lock in the child."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid() if parent_pid is None else parent_pid

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec
