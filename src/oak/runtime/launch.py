"""Start, stop and kill the W rank processes of one training job (independent of any scheduler).

``start_worker`` runs ``[sys.executable, "-m", "oak.runtime.worker", ...]`` once per rank (argument lists, no
shell), each in its own session so that terminal signals reach only the caller, with stdout+stderr appended to
``rank<r>.log`` in the job directory. The handle's ``terminate`` is the graceful stop (SIGTERM → the worker
checkpoints at its next step boundary and exits 0), ``kill`` the failure injector (SIGKILL, no checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from oak.errors import OakInputError
from oak.job import ADVICE_FILE, set_fence
from oak.runtime.procs import AdoptedProc, RankProc, clear_exit_files

STATUS_FILE = "status.json"  # same names as oak.runtime.worker, which this module does not import (no torch)
DONE_FILE = "done"
RENDEZVOUS_FILE = "rendezvous.json"
KILL_REAP_S = 10.0
"""How long ``kill`` waits for a SIGKILLed rank to be reaped (a rank stuck in an uninterruptible driver call
may never be); ranks still there afterwards are reported by ``WorkerHandle.unreaped``."""


@dataclass(frozen=True)
class WorkerSpec:
    """What to train: the worker's job-level options (steps, samples; see ``python -m oak.runtime.worker -h``).

    ``extra_args`` are appended verbatim to every rank's argument list (e.g. ``("--lr", "0.1")``).
    """

    model: str
    target_steps: int
    batch_size: int
    ckpt_every: int
    seed: int = 0
    width_mult: float = 1.0
    data: str | Path | None = None
    min_step_s: float = 0.0
    extra_args: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        args = [
            "--model",
            self.model,
            "--target-steps",
            str(self.target_steps),
            "--batch-size",
            str(self.batch_size),
            "--ckpt-every",
            str(self.ckpt_every),
            "--seed",
            str(self.seed),
            "--width-mult",
            repr(float(self.width_mult)),
        ]
        if self.data is not None:
            args += ["--data", str(self.data)]
        if self.min_step_s > 0:
            args += ["--min-step-s", repr(float(self.min_step_s))]
        return args + list(self.extra_args)


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port on ``addr`` that was free a moment ago (the OS picks it). Racy as a rendezvous port — another
    process may bind it before rank 0 does — so the launchers let rank 0 bind port 0 and publish the port."""
    with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


class WorkerHandle:
    """The running rank processes of one job incarnation."""

    def __init__(
        self,
        job_dir: Path,
        procs: list[RankProc],
        master_port: int | None,
        rendezvous: str | None = None,
        *,
        command: bool = False,
        incarnation: str = "",
    ) -> None:
        self.job_dir = job_dir
        self.procs = procs
        self._master_port = master_port
        self.rendezvous = rendezvous
        self.started_at = time.time()
        self._killed = False
        self.command = command
        """A user's command (job contract): signals go to each rank's process group (a wrapper's children
        too); exiting 0 unasked means done, and a rank ended by the SIGTERM it was sent is a stop."""
        self.incarnation = incarnation
        self.stop_requested = False

    @property
    def master_port(self) -> int | None:
        """The rendezvous port: the one given, or the one rank 0 published for this incarnation (None before)."""
        if self._master_port is None and self.rendezvous is not None:
            try:
                obj = json.loads((self.job_dir / RENDEZVOUS_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if isinstance(obj, dict) and obj.get("token") == self.rendezvous and isinstance(obj.get("port"), int):
                self._master_port = int(obj["port"])
        return self._master_port

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def world_size(self) -> int:
        return len(self.procs)

    def returncodes(self) -> list[int | None]:
        """Per-rank exit status (None while running; negative = killed by that signal)."""
        return [p.poll() for p in self.procs]

    def poll(self) -> int | None:
        """None while the job runs; else its status: the first non-zero rank status, or 0 when all ranks exited 0.

        A non-zero result can come while other ranks still run (a peer died): call ``kill`` to reap them. A
        command's rank ended by the SIGTERM it was asked to stop with counts as 0 (a stop, not a failure).
        """
        codes = self.returncodes()
        if self.command and self.stop_requested:
            codes = [0 if c == -signal.SIGTERM else c for c in codes]
        failed = [c for c in codes if c is not None and c != 0]
        if failed:
            return failed[0]
        if all(c is not None for c in codes):
            return 0
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (None: forever) for the job to end; returns ``poll()``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def _signal(self, sig: int) -> None:
        for p in self.procs:
            if self.command and p.poll() is None:  # the rank's whole session: a wrapper and its children
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, sig)
            elif p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # exited between poll and signal
                    p.send_signal(sig)

    def send(self, sig: int) -> None:
        """Send ``sig`` to every live rank (a command rank: its whole process group)."""
        self._signal(sig)

    def request_stop(self) -> None:
        """SIGTERM every live rank and return at once (stop many jobs in parallel, then ``wait`` on each):
        the ranks checkpoint at their next common step boundary and exit 0."""
        self.stop_requested = True
        self._signal(signal.SIGTERM)

    def terminate(self, timeout: float = 30.0) -> list[int | None]:
        """Graceful stop: SIGTERM every rank, wait up to ``timeout`` s for them to checkpoint and exit, then
        SIGKILL the stragglers. Returns the per-rank exit statuses (0 = stopped after a durable checkpoint;
        None = not reaped, see ``kill``)."""
        self.request_stop()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        return self.kill()

    def kill(self, reap_s: float = KILL_REAP_S) -> list[int | None]:
        """Failure injection: SIGKILL every live rank (no checkpoint) and reap them, waiting at most ``reap_s``
        seconds in all; returns exit statuses (None: a rank not reaped in time, listed by ``unreaped``)."""
        self._signal(signal.SIGKILL)
        if self._killed:
            reap_s = min(reap_s, 0.1)  # waited for once already: do not block the caller again
        self._killed = True
        deadline = time.monotonic() + reap_s
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        return [p.poll() for p in self.procs]

    def unreaped(self) -> list[int]:
        """Pids of ranks still not reaped (e.g. stuck in the GPU driver after SIGKILL)."""
        return [p.pid for p in self.procs if p.poll() is None]

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of each rank's log (rank 0 first), for a failure message."""
        return log_tail(self.job_dir, self.world_size, lines)

    def read_status(self) -> dict[str, Any] | None:
        """The job's ``status.json`` (written by rank 0), or None if absent or unreadable."""
        return read_status(self.job_dir)

    def is_done(self) -> bool:
        """Whether the job reached its target steps: the ``done`` marker exists (packaged worker), or the
        command exited 0 without being asked to stop (job contract)."""
        if self.command:
            return not self.stop_requested and self.poll() == 0
        return (self.job_dir / DONE_FILE).is_file()

    def __enter__(self) -> WorkerHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()


def read_status(job_dir: Path) -> dict[str, Any] | None:
    """A job directory's ``status.json`` (written by its rank 0), or None if absent or unreadable; every
    executor reads it through this."""
    try:
        with open(job_dir / STATUS_FILE, encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def log_tail(job_dir: Path, world_size: int, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of the last incarnation in ``rank<r>.log`` for r < ``world_size`` (read from
    the end, at most ``max_bytes`` each), each block headed by its file name; empty when no log exists."""
    blocks: list[str] = []
    for rank in range(world_size):
        path = job_dir / f"rank{rank}.log"
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - max_bytes))
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            continue
        all_lines = text.splitlines()
        starts = [i for i, line in enumerate(all_lines) if line.startswith("=== ")]
        current = all_lines[starts[-1] :] if starts else all_lines  # the last incarnation's lines only
        tail = current[-lines:]
        if tail:
            blocks.append(f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(blocks)


#: A command job's working directory in its ranks' environment (the contract; spawn_rank starts them there).
WORKDIR_ENV = "OAK_WORKDIR"


def spawn_rank(
    argv: list[str],
    env: Mapping[str, str],
    log_path: str | Path,
    note: str = "",
    preexec_fn: Callable[[], None] | None = None,
    log_argv0: bool = False,
    shown: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start one rank process from an argument list (no shell) in its own session, stdout and stderr appended
    to ``log_path`` (mode 0600) after a start line; ``note`` is added to that line (which shows ``argv`` from
    its second item: the interpreter is left out, unless ``log_argv0``; ``shown`` instead, when given). It starts in ``env[OAK_WORKDIR]`` when
    set (a command job's submitter's directory), else in the caller's."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if shown is None:
            shown = argv if log_argv0 else argv[1:]
        os.write(fd, f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} start{note}: {shown}\n".encode())
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            env=dict(env),
            close_fds=True,
            start_new_session=True,
            preexec_fn=preexec_fn,
            cwd=env.get(WORKDIR_ENV) or None,
        )
    finally:
        os.close(fd)


def physical_gpus(ids: Sequence[int], environ: Mapping[str, str]) -> list[str]:
    """The scheduler's GPU indices ``ids`` (0..N−1, counted under its own CUDA_VISIBLE_DEVICES) as the entries of
    that mask — device ids, GPU UUIDs or MIG names, passed through as written — or as themselves when it is unset.
    A rank's CUDA_VISIBLE_DEVICES must name the GPU the scheduler counted, not the i-th GPU of the machine."""
    mask = environ.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return [str(i) for i in ids]
    visible = [t.strip() for t in mask.split(",") if t.strip()]
    outside = [i for i in ids if not 0 <= i < len(visible)]
    if outside:
        raise OakInputError(
            f"GPU index {outside[0]} is outside CUDA_VISIBLE_DEVICES={mask!r} ({len(visible)} GPU(s) visible); "
            "run with at most that many --gpus"
        )
    return [visible[i] for i in ids]


@dataclass(frozen=True)
class CommandSpec:
    """A user's own training command (the job contract, docs/jobs.md): an argument list run as is (no shell),
    once per rank, with the contract's environment."""

    command: tuple[str, ...]
    extra_env: tuple[tuple[str, str], ...] = ()
    #: the directory every rank starts in (``OAK_WORKDIR``; None: the scheduler's own)
    workdir: str | None = None


@dataclass(frozen=True)
class RankCommand:
    """One rank's argument list and the environment variables it adds to the launcher's environment."""

    argv: list[str]
    env: dict[str, str]


CHECKPOINT_SUBDIR = "checkpoints"


def contract_env(
    job_name: str,
    job_dir: Path,
    rank: int,
    local_rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    incarnation: str,
) -> dict[str, str]:
    """The job contract's variables for one rank (docs/jobs.md): OAK_* plus torch.distributed's env:// names."""
    return {
        "OAK_JOB": job_name,
        "OAK_JOB_DIR": str(job_dir),
        "OAK_RANK": str(rank),
        "OAK_LOCAL_RANK": str(local_rank),
        "OAK_WORLD_SIZE": str(world_size),
        "OAK_CHECKPOINT_DIR": str(job_dir / CHECKPOINT_SUBDIR),
        "OAK_STATUS_FILE": str(job_dir / STATUS_FILE),
        "OAK_INCARNATION": incarnation,
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }


def private_folders(job_dir: Path) -> None:
    """``RUN_DIR/jobs`` and the job's folder exist and are 0700 (``mkdir(parents=True)`` would make the first
    with the umask; an older oak left them 0755)."""
    for folder in (job_dir.parent, job_dir):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_mode & 0o077 and folder.stat().st_uid == os.getuid():
            folder.chmod(0o700)


def prepare_job_dir(job_dir: Path, command: bool) -> None:
    """Ready a job's directory for a new incarnation, on every backend: it exists (0700), a command job has
    its checkpoint directory (the job contract's ``OAK_CHECKPOINT_DIR``), and no rank's exit status of an
    earlier incarnation is left (what is there once this incarnation's ranks exit is theirs)."""
    private_folders(job_dir)
    if command:
        (job_dir / CHECKPOINT_SUBDIR).mkdir(mode=0o700, exist_ok=True)
    clear_exit_files(job_dir)


ADVISED = 0
"""A packaged worker's ``ckpt_every`` that means "as the scheduler advises" (jobs file ``ckpt_every: advised``)."""
DEFAULT_CKPT_EVERY = 50
"""Its checkpoint interval (steps) before the scheduler has advice in steps (no step time measured yet)."""


def read_advice(job_dir: Path) -> dict[str, Any]:
    """The scheduler's checkpoint advice in ``job_dir`` (``oak.job.ADVICE_FILE``); {} if none or unreadable."""
    try:
        doc = json.loads((job_dir / ADVICE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def rank_commands(
    job_dir: Path,
    spec: WorkerSpec | CommandSpec,
    world_size: int,
    devices: Sequence[int],
    *,
    job_name: str,
    device_kind: Literal["cpu", "gpu"] = "cpu",
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    pin_cpus: bool = False,
    python: str = sys.executable,
    environ: Mapping[str, str] | None = None,
    own_device: bool = False,
) -> tuple[list[RankCommand], str | None, str]:
    """Every rank's command of one incarnation of ``world_size`` ranks on ``devices`` (GPUs: one per rank; CPU
    slots: contiguous equal shares, each rank running that many threads), and the incarnation's (rendezvous
    token, incarnation id). The packaged worker gets its options as arguments and
    rank 0 picks the rendezvous port (``master_port`` None); a command gets the contract's environment with
    ``MASTER_PORT`` = ``master_port`` or a port free a moment ago (torchrun's convention). ``own_device``: each
    rank runs where only its own device is seen (a Ray actor's bundle): on GPUs its local rank is 0 and the
    backend sets ``CUDA_VISIBLE_DEVICES``; on CPU it runs one thread. The new incarnation becomes the job's
    current one (``oak.job.set_fence``): a rank of an older one that still runs writes no checkpoint from now."""
    ids = [int(d) for d in devices]
    incarnation = uuid.uuid4().hex
    if job_dir.is_dir():  # from now on only this incarnation writes the job's checkpoint (oak.job's fence)
        set_fence(job_dir, incarnation)
    env_src = os.environ if environ is None else environ
    advice = read_advice(job_dir)
    if isinstance(spec, WorkerSpec) and spec.ckpt_every == ADVISED:  # as the scheduler advises, in steps
        spec = dataclasses.replace(spec, ckpt_every=int(advice.get("ckpt_every") or DEFAULT_CKPT_EVERY))
    command = isinstance(spec, CommandSpec)
    port = master_port if master_port is not None else (free_port(master_addr) if command else 0)
    token = uuid.uuid4().hex if world_size > 1 and master_port is None and not command else None
    out: list[RankCommand] = []
    for rank in range(world_size):
        local = 0 if own_device and device_kind == "gpu" else rank
        env = contract_env(job_name, job_dir, rank, local, world_size, master_addr, port, incarnation)
        env["PYTHONUNBUFFERED"] = "1"
        if advice.get("checkpoint_interval_s"):
            env["OAK_CHECKPOINT_INTERVAL_S"] = f"{float(advice['checkpoint_interval_s']):.6g}"
        if isinstance(spec, CommandSpec):
            argv = list(spec.command)
            env.update(dict(spec.extra_env))
            if spec.workdir:
                env[WORKDIR_ENV] = spec.workdir
        else:
            argv = [python, "-m", "oak.runtime.worker", "--job-dir", str(job_dir), *spec.argv()]
            argv += ["--world-size", str(world_size), "--rank", str(rank)]
            argv += ["--master-addr", master_addr, "--master-port", str(port)]
            if token is not None:
                argv += ["--rendezvous", token]
        if own_device:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
            if device_kind == "gpu":
                argv += [] if command else ["--device", "cuda", "--local-rank", "0", "--threads", "1"]
            else:
                env["CUDA_VISIBLE_DEVICES"] = ""
                argv += [] if command else ["--device", "cpu", "--threads", "1"]
        elif device_kind == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(physical_gpus(ids, env_src))
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"  # as on every other path (the contract sets both)
            if not command:
                argv += ["--device", "cuda", "--local-rank", str(rank), "--threads", "1"]
        else:
            per, extra = divmod(len(ids), world_size)
            lo = rank * per + min(rank, extra)
            share = ids[lo : lo + per + (1 if rank < extra else 0)]
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(len(share))
            if not command:
                argv += ["--device", "cpu", "--threads", str(len(share))]
                if pin_cpus:
                    argv += ["--cpus", ",".join(str(i) for i in share)]
        out.append(RankCommand(argv, env))
    return out, token, incarnation


def start_worker(
    job_dir: str | Path,
    spec: WorkerSpec | CommandSpec,
    world_size: int,
    devices: Sequence[int],
    *,
    device_kind: Literal["cpu", "gpu"] = "cpu",
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    pin_cpus: bool = False,
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    job_name: str | None = None,
) -> WorkerHandle:
    """Start the ``world_size`` rank processes of a job in ``job_dir`` and return their handle.

    ``devices``: the allocation. ``device_kind="cpu"``: CPU slot ids (≥ ``world_size``), split into contiguous
    equal shares; each rank runs ``len(share)`` torch threads (OMP_NUM_THREADS) and, with ``pin_cpus``, is pinned
    to those CPU ids. ``device_kind="gpu"``: exactly one GPU index per rank; each rank's CUDA_VISIBLE_DEVICES lists
    them, mapped through the scheduler's own mask (``physical_gpus``), and rank r uses the r-th.
    ``master_port``: rendezvous port on ``master_addr``; by default (W > 1) rank 0 binds a port the OS picks
    and publishes it with a fresh token in ``rendezvous.json`` (``WorkerHandle.master_port`` reads it).
    ``env``: extra environment variables for the ranks.
    """
    job = Path(job_dir)
    ids = [int(d) for d in devices]
    if world_size < 1:
        raise OakInputError(f"world_size must be >= 1, got {world_size}")
    if device_kind == "gpu":
        if len(ids) != world_size:
            raise OakInputError(f"{len(ids)} GPU(s) {ids} for world_size {world_size}: need one GPU per rank")
    elif device_kind == "cpu":
        if len(ids) < world_size:
            raise OakInputError(f"{len(ids)} CPU slot(s) {ids} for world_size {world_size}: need >= 1 per rank")
    else:
        raise OakInputError(f"device_kind must be 'cpu' or 'gpu', got {device_kind!r}")
    if len(set(ids)) != len(ids):
        raise OakInputError(f"duplicate device ids in {ids}")
    command = isinstance(spec, CommandSpec)
    prepare_job_dir(job, command)
    ranks, token, incarnation = rank_commands(
        job,
        spec,
        world_size,
        ids,
        job_name=job_name or job.name,
        device_kind=device_kind,
        master_addr=master_addr,
        master_port=master_port,
        pin_cpus=pin_cpus,
        python=python,
    )
    base_env = dict(os.environ)
    base_env.update(env or {})
    procs: list[RankProc] = []
    try:
        for rank, rc in enumerate(ranks):
            renv = dict(base_env)
            renv.update(rc.env)
            note = f" incarnation {incarnation} rank {rank}/{world_size}"
            argv = rc.argv
            if command:  # through oak.runtime.rank_exit: a scheduler that adopts the rank learns how it ended
                _check_runnable(rc.argv, renv)
                argv = [python, "-m", "oak.runtime.rank_exit", str(job), str(rank), "--", *rc.argv]
            procs.append(spawn_rank(argv, renv, job / f"rank{rank}.log", note, shown=rc.argv if command else None))
    except BaseException as exc:
        for p in procs:
            p.kill()
            p.wait()
        if command and isinstance(exc, OSError):  # no such program, not executable: the job's own fault
            raise OakInputError(f"job {job.name!r}: cannot start its command {ranks[0].argv!r} ({exc})") from None
        raise
    port = int(ranks[0].env["MASTER_PORT"])
    return WorkerHandle(job, procs, port or None, token, command=command, incarnation=incarnation)


def _check_runnable(argv: list[str], env: Mapping[str, str]) -> None:
    """Raise ``FileNotFoundError`` / ``PermissionError`` as starting ``argv`` would (its program resolved as
    ``execvp`` does, in the rank's working directory): the rank runs under a wrapper that would only report it
    as a failed rank."""
    prog = argv[0] if argv else ""
    if os.sep in prog:
        path = Path(env.get(WORKDIR_ENV) or os.getcwd()) / prog
        if not path.is_file():
            raise FileNotFoundError(2, "No such file or directory", prog)
        if not os.access(path, os.X_OK):
            raise PermissionError(13, "Permission denied", prog)
    elif shutil.which(prog, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, "No such file or directory", prog)


def adopt_worker(job_dir: str | Path, pids: Sequence[int], *, command: bool) -> WorkerHandle:
    """The handle of a running incarnation an earlier scheduler started (its ranks' pids in rank order, checked
    by the caller with ``procs.adoptable``): signals, status and done-ness as for one this process started; exit
    statuses from the files the ranks leave (``oak.runtime.procs``)."""
    job = Path(job_dir)
    procs: list[RankProc] = [AdoptedProc(pid, job, rank) for rank, pid in enumerate(pids)]
    return WorkerHandle(job, procs, None, None, command=command)
