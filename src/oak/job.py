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

``should_stop`` is True once the process received SIGTERM (the helper installs a handler at import, in the main
thread, unless the script installed its own).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

MIN_REPORT_INTERVAL_S = 0.5

_stop = threading.Event()
_state: dict[str, Any] = {"last_write": None, "last_step": None, "last_time": None}


def _on_term(signum: int, frame: Any) -> None:
    _stop.set()


def _install() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_term)
    except (ValueError, OSError):  # not the main interpreter thread, or an embedded interpreter
        pass


_install()


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
    """True once the scheduler asked the job to stop (SIGTERM): checkpoint and exit 0."""
    return _stop.is_set()


def request_stop() -> None:
    """Make ``should_stop`` true (for a script that handles SIGTERM itself and wants the same flag)."""
    _stop.set()


def report(step: int, total_steps: int | None = None, batch_size: int | None = None) -> None:
    """Tell the scheduler the job is at optimiser step ``step`` (of ``total_steps``, global batch
    ``batch_size`` samples). Call it after every step, on rank 0 at least (other ranks' calls do nothing)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"oak.job.report: step must be an integer >= 0, got {step!r}")
    if total_steps is not None and (
        isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1
    ):
        raise ValueError(f"oak.job.report: total_steps must be a positive integer or None, got {total_steps!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"oak.job.report: batch_size must be a positive integer or None, got {batch_size!r}")
    path = os.environ.get("OAK_STATUS_FILE")
    if not path or rank() != 0:
        return
    now = time.monotonic()
    last_write = _state["last_write"]
    final = total_steps is not None and step >= total_steps
    if last_write is not None and now - last_write < MIN_REPORT_INTERVAL_S and not final:
        return
    status: dict[str, Any] = {
        "incarnation": os.environ.get("OAK_INCARNATION", ""),
        "pid": os.getpid(),
        "step": step,
        "total_steps": total_steps,
        "batch_size": batch_size,
        "world_size": world_size(),
        "updated_at": time.time(),
    }
    last_step, last_time = _state["last_step"], _state["last_time"]
    if last_step is not None and step > last_step:  # timed from the first report: restore time is not a step
        status["steps_timed"] = step - last_step
        status["step_time_s"] = (now - last_time) / (step - last_step)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh)
    os.replace(tmp, path)
    _state["last_write"], _state["last_step"], _state["last_time"] = now, step, now
