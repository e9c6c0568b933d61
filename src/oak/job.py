"""The job side of the job contract (docs/jobs.md): a tiny, dependency-free helper for a user's training script.

    import oak.job

    ckpt = oak.job.checkpoint_dir()            # persistent across incarnations (OAK_CHECKPOINT_DIR)
    step = load_my_checkpoint(ckpt)            # 0 on the first start
    while step < total:
        train_one_step()
        step += 1
        oak.job.report(step, total_steps=total, batch_size=global_batch)
        if oak.job.should_stop():              # SIGTERM: the scheduler wants the devices back
            save_my_checkpoint(ckpt, step)
            raise SystemExit(0)                # exit 0 within the grace period
        if step % 50 == 0:
            save_my_checkpoint(ckpt, step)

``report`` writes the job's status file (rank 0 only; at most every ``MIN_REPORT_INTERVAL_S`` seconds, and on
the first and last step) atomically: the step, the total when known, the global batch and the mean step time
since the previous write. The scheduler learns the job's throughput model from those step times; a job that
never reports is scored by its elapsed time only. Outside OAK (no ``OAK_JOB`` in the environment) ``report``
does nothing and ``checkpoint_dir`` is ``./oak-checkpoints``, so the same script runs by hand.

**Fencing.** Each launch of the job is a new incarnation (``OAK_INCARNATION``), and the launcher makes it the
job's current one (the *fence*, ``OAK_JOB_DIR/fence``) before its ranks start. A rank of an older incarnation
that still runs — on a node cut off by a network partition that comes back, or frozen and woken up — must not
write the job's checkpoint, which the new incarnation reads and writes: ``commit(tmp, final)`` renames a
finished temporary file into place only while this incarnation is the current one (under a lock the launcher
takes too, so no rename lands after a newer launch), and returns False otherwise; ``fenced()`` says so at any
time, and ``report`` writes nothing once fenced.

``should_stop`` is True once the process received SIGTERM. Its first call (in the main thread) installs the
SIGTERM handler that sets the flag, unless the script installed its own: a script that never asks keeps
SIGTERM's default action and ends at once (a stop without a checkpoint, not a failure).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import operator
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MIN_REPORT_INTERVAL_S = 0.5
FENCE_FILE = "fence"
"""In the job directory: the incarnation id of the job's current incarnation (written by the launcher)."""
FENCE_LOCK = "fence.lock"
ADVICE_FILE = "advice.json"
"""In the job directory: the scheduler's advice, ``{"checkpoint_interval_s": S, "ckpt_every": N}`` (rewritten
as it learns the job's checkpoint cost and failure rate)."""
ADVICE_READ_S = 1.0
"""How often (s) ``should_checkpoint`` looks at the advice file again."""

_stop = threading.Event()
_state: dict[str, Any] = {"last_write": None, "last_step": None, "last_time": None, "installed": False}
_advice: dict[str, Any] = {"read_at": None, "interval": None, "last_ckpt": None, "checkpoint_s": None}


def _on_term(signum: int, frame: Any) -> None:
    _stop.set()


def _install() -> None:
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    _state["installed"] = True
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_term)
    except (ValueError, OSError):  # not the main interpreter thread, or an embedded interpreter
        pass


def in_oak() -> bool:
    """Whether this process runs as an OAK job (the contract's environment is set)."""
    return "OAK_JOB" in os.environ


def rank() -> int:
    """This process's rank (0 outside OAK)."""
    return int(os.environ.get("OAK_RANK", "0"))


def world_size() -> int:
    """Ranks of this incarnation (1 outside OAK)."""
    return int(os.environ.get("OAK_WORLD_SIZE", "1"))


def checkpoint_dir() -> Path:
    """The job's checkpoint folder, kept across incarnations (created if missing)."""
    path = Path(os.environ.get("OAK_CHECKPOINT_DIR", "oak-checkpoints"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def should_stop() -> bool:
    """True once the scheduler asked the job to stop (SIGTERM): checkpoint and exit 0. Call it from the main
    thread first (that call installs the handler; SIGTERM before it ends the process)."""
    _install()
    return _stop.is_set()


def request_stop() -> None:
    """Make ``should_stop`` true (for a script that handles SIGTERM itself and wants the same flag)."""
    _stop.set()


class Fenced(RuntimeError):
    """Raised by a writer of the job's state that finds a newer incarnation running the job."""


def _read_fence(job_dir: str | Path) -> str:
    try:
        return (Path(job_dir) / FENCE_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def fenced() -> bool:
    """True once a newer incarnation of this job has been launched: this process must not write the job's
    state (its checkpoint, its status). False outside OAK, or where no launcher keeps a fence."""
    mine, job_dir = os.environ.get("OAK_INCARNATION", ""), os.environ.get("OAK_JOB_DIR", "")
    if not mine or not job_dir:
        return False
    current = _read_fence(job_dir)
    return bool(current) and current != mine


@contextlib.contextmanager
def _fence_lock(job_dir: str | Path) -> Iterator[None]:
    fd = os.open(Path(job_dir) / FENCE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def holding_fence() -> Iterator[bool]:
    """Hold the job's fence while writing its shared state: yields True if this incarnation is the current
    one (write now: no newer launch can happen until the block ends), False if it is fenced (write nothing).
    Outside OAK: True, no lock."""
    job_dir = os.environ.get("OAK_JOB_DIR", "")
    if not job_dir or not os.environ.get("OAK_INCARNATION"):
        yield True
        return
    with _fence_lock(job_dir):
        yield not fenced()


def commit(tmp: str | Path, final: str | Path) -> bool:
    """``os.replace(tmp, final)`` — a finished checkpoint file into place — if this incarnation is the job's
    current one; else ``tmp`` is removed, ``final`` left as it is, and False returned (exit: a newer
    incarnation runs the job)."""
    with holding_fence() as current:
        if current:
            os.replace(tmp, final)
            return True
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return False


def set_fence(job_dir: str | Path, incarnation: str) -> None:
    """The launcher's side: make ``incarnation`` the job's current one, before its ranks start (every older
    incarnation's ``commit`` fails from then on)."""
    d = Path(job_dir)
    with _fence_lock(d):
        tmp = d / f"{FENCE_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(incarnation + "\n")
        os.replace(tmp, d / FENCE_FILE)


def _count(name: str, value: Any, minimum: int, optional: bool) -> int | None:
    if value is None and optional:
        return None
    try:
        n = operator.index(value)  # int, numpy integers; not bool, float or str
    except TypeError:
        n = None
    if n is None or isinstance(value, bool) or n < minimum:
        what = f"an integer >= {minimum}" + (" or None" if optional else "")
        raise ValueError(f"oak.job.report: {name} must be {what}, got {value!r}")
    return n


def checkpoint_interval() -> float | None:
    """The checkpoint interval (s) the scheduler advises for this job: from its measured checkpoint cost and
    the failure rate where it runs (Young/Daly, with the end of its run in view once the scheduler knows its steps
    left), re-read from the job directory's advice at most every
    ``ADVICE_READ_S`` s, else the launch's ``OAK_CHECKPOINT_INTERVAL_S``; None outside OAK or without advice."""
    now = time.monotonic()
    read_at = _advice["read_at"]
    if read_at is None or now - read_at >= ADVICE_READ_S:
        _advice["read_at"] = now
        interval: float | None = None
        job_dir = os.environ.get("OAK_JOB_DIR", "")
        try:
            with open(Path(job_dir) / ADVICE_FILE, encoding="utf-8") as fh:
                interval = float(json.load(fh)["checkpoint_interval_s"])
        except (OSError, ValueError, KeyError, TypeError):
            try:
                interval = float(os.environ["OAK_CHECKPOINT_INTERVAL_S"])
            except (KeyError, ValueError):
                interval = None
        _advice["interval"] = interval if interval is not None and interval > 0 else None
    value = _advice["interval"]
    return None if value is None else float(value)


def should_checkpoint() -> bool:
    """Whether a checkpoint is due now: the advised interval (``checkpoint_interval``) has passed since the
    last time this returned True (or since the first call). Call it after each step and checkpoint when it
    says so; without advice it is always False (checkpoint as you would anyway). Time the save and pass it
    to ``report(..., checkpoint_s=...)``: the advice follows what checkpoints cost."""
    interval = checkpoint_interval()
    now = time.monotonic()
    if _advice["last_ckpt"] is None:
        _advice["last_ckpt"] = now
    if interval is None or now - _advice["last_ckpt"] < interval:
        return False
    _advice["last_ckpt"] = now
    return True


def report(
    step: int, total_steps: int | None = None, batch_size: int | None = None, *, checkpoint_s: float | None = None
) -> None:
    """Tell the scheduler the job is at optimiser step ``step`` (of ``total_steps``, global batch
    ``batch_size`` samples). Call it after every step, on rank 0 at least (other ranks' calls do nothing).
    ``checkpoint_s``: how long the job's last checkpoint took (s), once after each checkpoint: the
    scheduler's checkpoint advice uses it. Never raises for the status file itself: a write that fails
    (disk full, a vanished folder) is skipped."""
    if checkpoint_s is not None:
        if not (isinstance(checkpoint_s, int | float) and 0 <= checkpoint_s < 1e9):
            raise ValueError(f"oak.job.report: checkpoint_s must be a number of seconds >= 0, got {checkpoint_s!r}")
        _advice["checkpoint_s"] = float(checkpoint_s)
    s = _count("step", step, 0, False)
    total = _count("total_steps", total_steps, 1, True)
    batch = _count("batch_size", batch_size, 1, True)
    path = os.environ.get("OAK_STATUS_FILE")
    if not path or rank() != 0:
        return
    now = time.monotonic()
    last_write = _state["last_write"]
    final = total is not None and s is not None and s >= total
    if last_write is not None and now - last_write < MIN_REPORT_INTERVAL_S and not final:
        return
    if fenced():  # a newer incarnation runs the job: its status is that one's to write
        return
    status: dict[str, Any] = {
        "incarnation": os.environ.get("OAK_INCARNATION", ""),
        "pid": os.getpid(),
        "step": s,
        "total_steps": total,
        "batch_size": batch,
        "world_size": world_size(),
        "updated_at": time.time(),
    }
    if _advice["checkpoint_s"] is not None:
        status["checkpoint_s"] = _advice["checkpoint_s"]
    last_step, last_time = _state["last_step"], _state["last_time"]
    if last_step is not None and s is not None and s > last_step:  # timed from the first report, not the restore
        status["steps_timed"] = s - last_step
        status["step_time_s"] = (now - last_time) / (s - last_step)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        # 0600, as every file of the scheduler-worker channel (docs/runtime.md), whatever the rank's umask
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
            json.dump(status, fh)
        os.replace(tmp, path)
    except OSError:
        return
    _state["last_write"], _state["last_step"], _state["last_time"] = now, s, now
