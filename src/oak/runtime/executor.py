"""Executors: how the runtime scheduler starts, stops and kills the training processes of its jobs.

The scheduler decides; an executor enacts. :class:`LocalExecutor` runs each job's ranks as local processes
(:mod:`oak.runtime.launch`); the Ray executor (:mod:`oak.runtime.ray_executor`) runs them as Ray actors in
a placement group. Both report per job one of ``running``, ``done`` (target steps reached, final checkpoint
durable), ``stopped`` (exited 0 after a checkpoint without finishing) or ``failed`` (died: killed, crashed, or
a peer or node lost).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from oak.runtime.jobs_file import RuntimeJob
from oak.runtime.launch import DONE_FILE, CommandSpec, WorkerHandle, WorkerSpec, adopt_worker, start_worker
from oak.runtime.procs import adoptable

JobState = Literal["running", "done", "stopped", "failed"]


def classify(codes: Sequence[int | None], *, command: bool, stop_requested: bool, done_marker: bool) -> JobState:
    """How an incarnation stands, from its ranks' exit statuses (None: still running; negative: ended by that
    signal) — the one rule every backend applies. A rank that failed makes it ``failed`` at once (its peers are
    the backend's to reap); all ranks exited 0: ``done`` if it reached its target — the packaged worker's
    ``done_marker``; a command that exited 0 unasked — else ``stopped``. A command ended by the SIGTERM it was
    asked to stop with exited as asked: 0."""
    if command and stop_requested:
        codes = [0 if c == -signal.SIGTERM else c for c in codes]
    if any(c is not None and c != 0 for c in codes):
        return "failed"
    if any(c is None for c in codes):
        return "running"
    finished = not stop_requested if command else done_marker
    return "done" if finished else "stopped"


@dataclass(frozen=True)
class Launch:
    """One incarnation to start: the job, its directory, the device ids it gets and the worker seed."""

    job: RuntimeJob
    job_dir: Path
    devices: tuple[int, ...]
    seed: int


class Executor(Protocol):
    """What the scheduler needs from a backend (all waits bounded by a timeout)."""

    device_kind: str

    def launch(self, item: Launch) -> None: ...

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        """Follow the incarnation of ``item`` an earlier scheduler of this run launched (its recorded rank pids,
        in rank order) as if launched here, when it still runs whole; False if it cannot (then the scheduler
        stops what is left of it and starts the job again). A backend that cannot adopt returns False."""
        ...

    def state(self, name: str) -> JobState | None: ...

    def status(self, name: str) -> dict[str, Any] | None: ...

    def pids(self, name: str) -> list[int]: ...

    def exit_codes(self, name: str) -> list[int | None]:
        """Per-rank exit statuses of the job's current incarnation (None: still running or unknown; negative:
        killed by that signal); meaningful once ``state`` reported it ``failed``, until ``kill``."""
        ...

    def unreaped(self, name: str) -> list[int]:
        """Pids of the job's rank processes that a SIGKILL did not end within the bounded wait (stuck in the
        kernel or a GPU driver), kept after ``kill`` so that they can be reported."""
        ...

    def request_stop(self, names: list[str]) -> None:
        """Ask the named jobs to checkpoint and exit (SIGTERM) and return at once; ``state`` reports each one's
        outcome once it has exited (``stopped``, ``done`` or ``failed``), then ``kill`` cleans it up. The
        scheduler keeps ticking meanwhile and SIGKILLs (``kill``) what has not exited by its deadline."""
        ...

    def stop(self, names: list[str], timeout_s: float) -> dict[str, JobState]:
        """``request_stop`` and wait up to ``timeout_s`` s, SIGKILL the rest; the outcome of each (blocking: used
        at shutdown)."""
        ...

    def kill(self, name: str) -> None: ...

    def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
        """Compare the round's intended allocation (job → device ids; jobs without devices left out) with what
        the backend runs; stop what runs but is not intended and return every discrepancy, one line each."""
        ...

    def shutdown(self) -> None: ...


def job_spec(job: RuntimeJob, seed: int) -> WorkerSpec | CommandSpec:
    """What a jobs-file entry runs: the user's command (job contract) or the packaged worker's options."""
    if job.is_command:
        return CommandSpec(command=job.command, extra_env=job.env, workdir=job.workdir)
    return worker_spec(job, seed)


def worker_spec(job: RuntimeJob, seed: int) -> WorkerSpec:
    """The worker options of a jobs-file entry of a packaged model."""
    return WorkerSpec(
        model=job.model,
        target_steps=job.target_steps,
        batch_size=job.batch_size,
        ckpt_every=job.ckpt_every,
        seed=seed,
        width_mult=job.width_mult,
        data=job.data,
        min_step_s=job.min_step_s,
    )


class LocalExecutor:
    """Each job's ranks as local processes, one rank per device (CPU slot or GPU)."""

    def __init__(self, device_kind: Literal["cpu", "gpu"] = "cpu") -> None:
        self.device_kind: str = device_kind
        self._kind: Literal["cpu", "gpu"] = device_kind
        self._handles: dict[str, WorkerHandle] = {}
        self._stuck: dict[str, WorkerHandle] = {}

    def launch(self, item: Launch) -> None:
        if item.job.name in self._handles:
            raise RuntimeError(f"job {item.job.name!r} is already running")
        self._stuck.pop(item.job.name, None)
        self._handles[item.job.name] = start_worker(
            item.job_dir,
            job_spec(item.job, item.seed),
            len(item.devices),
            item.devices,
            device_kind=self._kind,
            job_name=item.job.name,
        )

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        if item.job.name in self._handles or not adoptable(pids, item.job_dir):
            return False
        self._handles[item.job.name] = adopt_worker(item.job_dir, pids, command=item.job.is_command)
        return True

    def state(self, name: str) -> JobState | None:
        h = self._handles.get(name)
        if h is None:
            return None
        outcome = _outcome(h)
        if outcome == "failed":
            h.kill()  # reap the surviving peers of a dead rank
        return outcome

    def status(self, name: str) -> dict[str, Any] | None:
        h = self._handles.get(name)
        return None if h is None else h.read_status()

    def pids(self, name: str) -> list[int]:
        h = self._handles.get(name)
        return [] if h is None else h.pids

    def exit_codes(self, name: str) -> list[int | None]:
        h = self._handles.get(name)
        return [] if h is None else h.returncodes()

    def request_stop(self, names: list[str]) -> None:
        for n in names:
            h = self._handles.get(n)
            if h is not None and not h.stop_requested:
                h.request_stop()

    def stop(self, names: list[str], timeout_s: float) -> dict[str, JobState]:
        """SIGTERM every named job at once, wait up to ``timeout_s`` s for their checkpoints, SIGKILL the rest."""
        handles = {n: self._handles[n] for n in names if n in self._handles}
        self.request_stop(list(handles))
        deadline = time.monotonic() + timeout_s
        out: dict[str, JobState] = {}
        for name, h in handles.items():
            h.wait(max(0.0, deadline - time.monotonic()))
            outcome = _outcome(h)
            h.kill()
            out[name] = "failed" if outcome == "running" else outcome  # not out in time: SIGKILLed
            del self._handles[name]
        return out

    def kill(self, name: str) -> None:
        h = self._handles.pop(name, None)
        if h is not None:
            h.kill()
            if h.unreaped():
                self._stuck[name] = h

    def unreaped(self, name: str) -> list[int]:
        h = self._stuck.get(name)
        return [] if h is None else h.unreaped()

    def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
        issues: list[str] = []
        for name in sorted(set(self._handles) - set(intended)):
            issues.append(f"{name}: runs on {self._handles[name].world_size} rank(s) but is not intended; killed")
            self.kill(name)
        for name, devices in sorted(intended.items()):
            h = self._handles.get(name)
            if h is None:
                issues.append(f"{name}: intended on {len(devices)} device(s), no process runs it")
            elif h.world_size != len(devices):
                issues.append(f"{name}: intended on {len(devices)} device(s), runs {h.world_size} rank(s)")
        return issues

    def shutdown(self) -> None:
        for name in list(self._handles):
            self.kill(name)


def _outcome(h: WorkerHandle) -> JobState:
    return classify(
        h.returncodes(),
        command=h.command,
        stop_requested=h.stop_requested,
        done_marker=(h.job_dir / DONE_FILE).is_file(),
    )
