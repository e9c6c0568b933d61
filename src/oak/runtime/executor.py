"""Executors: how the runtime scheduler starts, stops and kills the training processes of its jobs.

The scheduler decides; an executor enacts. :class:`LocalExecutor` runs each job's ranks as local processes
(:mod:`oak.runtime.launch`): the incarnation layer (:mod:`oak.runtime.incarnations`) over
:class:`LocalBackend`, which only launches, kills and lists. The Ray executor (:mod:`oak.runtime.ray_executor`)
runs them as Ray actors in a placement group, the SLURM executor as one batch job per incarnation. Each reports
per job one of ``running``, ``done`` (target steps reached, final checkpoint durable), ``stopped`` (exited 0
after a checkpoint without finishing) or ``failed`` (died: killed, crashed, or a peer or node lost), by the one
rule :func:`classify`.
"""

from __future__ import annotations

import signal
from typing import Any, Literal, Protocol

from oak.runtime.incarnations import Incarnations, JobState, Launch, Ranks, classify
from oak.runtime.jobs_file import RuntimeJob
from oak.runtime.launch import CommandSpec, WorkerHandle, WorkerSpec, adopt_worker, start_worker
from oak.runtime.procs import adoptable

__all__ = [
    "Executor",
    "JobState",
    "Launch",
    "LocalBackend",
    "LocalExecutor",
    "classify",
    "job_spec",
    "worker_spec",
]


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


class LocalBackend:
    """Each job's ranks as local processes, one rank per device (CPU slot or GPU): a
    :class:`~oak.runtime.incarnations.Backend` that can adopt (by pid, verified through ``/proc``)."""

    def __init__(self, device_kind: Literal["cpu", "gpu"] = "cpu") -> None:
        self.device_kind: str = device_kind
        self._kind: Literal["cpu", "gpu"] = device_kind
        self._handles: dict[str, WorkerHandle] = {}

    def launch(self, item: Launch) -> None:
        self._handles[item.job.name] = start_worker(
            item.job_dir,
            job_spec(item.job, item.seed),
            len(item.devices),
            item.devices,
            device_kind=self._kind,
            job_name=item.job.name,
        )

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        if not adoptable(pids, item.job_dir):
            return False
        self._handles[item.job.name] = adopt_worker(item.job_dir, pids, command=item.job.is_command)
        return True

    def kill(self, name: str, sig: int) -> None:
        h = self._handles.get(name)
        if h is None:
            return
        if sig == signal.SIGKILL:
            h.kill()  # and reap, bounded
        elif sig == signal.SIGTERM:
            h.request_stop()
        else:
            h.send(sig)

    def list(self) -> dict[str, Ranks]:
        return {n: Ranks(tuple(h.pids), tuple(h.returncodes())) for n, h in self._handles.items()}


class LocalExecutor(Incarnations):
    """Each job's ranks as local processes: the incarnation layer over :class:`LocalBackend`."""

    backend: LocalBackend

    def __init__(self, device_kind: Literal["cpu", "gpu"] = "cpu") -> None:
        super().__init__(LocalBackend(device_kind))
