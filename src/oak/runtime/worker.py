"""The training worker: one process per rank of a data-parallel job, checkpointing and resumable.

Run as ``python -m oak.runtime.worker --job-dir DIR --model {tiny,resnet18} --target-steps N --batch-size B
--ckpt-every K --world-size W [--rank R --master-addr 127.0.0.1 --master-port P] [--data PATH] [--seed S]
[--width-mult F]``. Exit status: 0 = finished (``done`` marker written) or stopped by SIGTERM/SIGINT after a
checkpoint; 1 = failed (e.g. a peer died); 2 = bad input. Files in the job directory (all mode 0600, written by
rank 0 only):

- ``ckpt-<step>.pt`` / ``.sha256``: checkpoints (``oak.runtime.checkpoint``), every K steps, on stop and at the end;
- ``status.json``: progress for the scheduler, rewritten atomically at most every ``--status-interval`` seconds
  and at every state change (fields: ``STATUS_FIELDS``);
- ``loss.csv``: ``step,loss,incarnation,time`` per optimiser step (a resumed run re-appends recomputed steps);
- ``counters.json``: cumulative restart/checkpoint ledger across incarnations;
- ``done``: written once ``target_steps`` is reached and the final checkpoint is durable.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import hashlib
import ipaddress
import json
import math
import os
import random
import signal
import socket
import sys
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

_EARLY_SIGNALS: list[int] = []
# Process start (epoch s) when run as ``python -m``: start-up cost then includes the interpreter's torch import.
_MAIN_STARTED_AT: float | None = time.time() if __name__ == "__main__" else None


def _early_stop_handler(signum: int, frame: types.FrameType | None) -> None:
    _EARLY_SIGNALS.append(signum)


if __name__ == "__main__":
    # Installed before the multi-second torch import, so that a SIGTERM during start-up also means "stop at the
    # first step boundary and exit 0" instead of dying with -15.
    signal.signal(signal.SIGTERM, _early_stop_handler)
    signal.signal(signal.SIGINT, _early_stop_handler)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

import oak.job  # noqa: E402
from oak.errors import OakInputError  # noqa: E402
from oak.runtime import checkpoint  # noqa: E402
from oak.runtime.data import Dataset, SampleStream, load_cifar10, shard, synthetic  # noqa: E402
from oak.runtime.jobs_file import MAX_MIN_STEP_S  # noqa: E402
from oak.runtime.models import MODELS, MomentumSGD, build_model  # noqa: E402

STATUS_FILE = "status.json"
LOSS_FILE = "loss.csv"
COUNTERS_FILE = "counters.json"
DONE_FILE = "done"
RENDEZVOUS_FILE = "rendezvous.json"
CKPT_FORMAT = 1
EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_FENCED = 0, 1, 2, 3
"""EXIT_FENCED: a newer incarnation of the job runs (``oak.job.fenced``); this rank wrote nothing and left."""
STATUS_FIELDS = (
    "step",
    "target_steps",
    "loss",
    "samples_per_s",
    "t_ckpt_save_s",
    "t_restore_s",
    "restarts",
    "incarnation_started_at",
    "pid",
    "world_size",
    "done",
)


@dataclass(frozen=True)
class WorkerConfig:
    """One rank's settings (see ``parse_args`` for units and defaults)."""

    job_dir: Path
    model: str
    target_steps: int
    batch_size: int
    ckpt_every: int
    world_size: int = 1
    rank: int = 0
    local_rank: int | None = None
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    rendezvous: str | None = None
    data: Path | None = None
    seed: int = 0
    width_mult: float = 1.0
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    device: str = "auto"
    threads: int | None = None
    cpus: tuple[int, ...] | None = None
    keep: int = checkpoint.DEFAULT_KEEP
    status_interval_s: float = 0.2
    pg_timeout_s: float = 120.0
    min_step_s: float = 0.0


def _env_int(name: str, default: int) -> int:
    """An integer of the job contract's environment (docs/jobs.md), or ``default`` when unset or not one."""
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def _build_parser() -> argparse.ArgumentParser:
    """The worker's options. Under the job contract (``command: [python, -m, oak.runtime.worker, --model ...]``
    in a jobs file) the rank, world size, rendezvous and job directory default to the contract's variables
    (OAK_JOB_DIR, OAK_WORLD_SIZE, OAK_RANK, OAK_LOCAL_RANK, MASTER_ADDR, MASTER_PORT), as torchrun's do."""
    env = os.environ
    job_dir = env.get("OAK_JOB_DIR")
    p = argparse.ArgumentParser(prog="python -m oak.runtime.worker", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--job-dir",
        type=Path,
        required=job_dir is None,
        default=Path(job_dir) if job_dir else None,
        help="job directory (checkpoints, status, logs); default $OAK_JOB_DIR",
    )
    p.add_argument("--model", choices=MODELS, required=True)
    p.add_argument("--target-steps", type=int, required=True, help="optimiser steps at which the job is done")
    p.add_argument("--batch-size", type=int, required=True, help="global batch (samples/step), split over ranks")
    p.add_argument("--ckpt-every", type=int, required=True, help="checkpoint every K steps")
    p.add_argument(
        "--world-size", type=int, default=_env_int("OAK_WORLD_SIZE", 1), help="data-parallel ranks W ($OAK_WORLD_SIZE)"
    )
    p.add_argument("--rank", type=int, default=_env_int("OAK_RANK", 0), help="this process's rank in [0, W)")
    p.add_argument(
        "--local-rank",
        type=int,
        default=_env_int("OAK_LOCAL_RANK", -1) if "OAK_LOCAL_RANK" in env else None,
        help="GPU index among CUDA_VISIBLE_DEVICES (default $OAK_LOCAL_RANK, else rank)",
    )
    p.add_argument(
        "--master-addr", default=env.get("MASTER_ADDR", "127.0.0.1"), help="rendezvous address (rank 0 binds it)"
    )
    p.add_argument(
        "--master-port",
        type=int,
        default=_env_int("MASTER_PORT", 0),
        help="rendezvous TCP port; 0 (W > 1): rank 0 binds a port the OS picks and publishes it (--rendezvous)",
    )
    p.add_argument(
        "--rendezvous",
        default=None,
        metavar="TOKEN",
        help="with --master-port 0: this incarnation's token; rank 0 writes {token, port} to JOB_DIR/"
        "rendezvous.json and the other ranks wait (up to --pg-timeout) for that token",
    )
    p.add_argument("--data", type=Path, default=None, help="cifar-10-batches-py folder; default synthetic data")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width-mult", type=float, default=1.0, help="resnet18 channel multiplier (0.25 for CPU)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default $OMP_NUM_THREADS or 1)")
    p.add_argument("--cpus", default=None, help="comma-separated CPU ids to pin this process to")
    p.add_argument("--keep", type=int, default=checkpoint.DEFAULT_KEEP, help="checkpoints kept")
    p.add_argument("--status-interval", type=float, default=0.2, help="seconds between status.json rewrites")
    p.add_argument("--pg-timeout", type=float, default=120.0, help="torch.distributed timeout in seconds")
    p.add_argument(
        "--min-step-s",
        type=float,
        default=0.0,
        help="pad every optimiser step to at least this many seconds (emulates a slower model; default 0)",
    )
    return p


def parse_args(argv: list[str] | None = None) -> WorkerConfig:
    """Parse and validate the command line; raises ``OakInputError`` naming the offending option."""
    a = _build_parser().parse_args(argv)

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise OakInputError(msg)

    need(a.target_steps >= 1, f"--target-steps must be >= 1, got {a.target_steps}")
    need(a.ckpt_every >= 1, f"--ckpt-every must be >= 1, got {a.ckpt_every}")
    need(a.world_size >= 1, f"--world-size must be >= 1, got {a.world_size}")
    need(0 <= a.rank < a.world_size, f"--rank must be in [0, {a.world_size}), got {a.rank}")
    need(a.batch_size >= a.world_size, f"--batch-size {a.batch_size} must be >= --world-size {a.world_size}")
    need(0 <= a.master_port <= 65535, f"--master-port must be in [0, 65535], got {a.master_port}")
    need(
        a.world_size == 1 or a.master_port > 0 or bool(a.rendezvous),
        "--master-port must be in [1, 65535] when W > 1, or 0 with --rendezvous TOKEN (rank 0 picks the port)",
    )
    need(
        a.rendezvous is None or (0 < len(a.rendezvous) <= 64 and a.rendezvous.isalnum()),
        f"--rendezvous must be 1-64 letters or digits, got {a.rendezvous!r}",
    )
    need(math.isfinite(a.width_mult) and a.width_mult > 0, f"--width-mult must be > 0, got {a.width_mult}")
    need(math.isfinite(a.lr) and a.lr > 0, f"--lr must be > 0, got {a.lr}")
    need(a.keep >= 1, f"--keep must be >= 1, got {a.keep}")
    need(a.threads is None or a.threads >= 1, f"--threads must be >= 1, got {a.threads}")
    need(a.status_interval >= 0, f"--status-interval must be >= 0, got {a.status_interval}")
    need(a.pg_timeout > 0, f"--pg-timeout must be > 0, got {a.pg_timeout}")
    need(
        math.isfinite(a.min_step_s) and 0 <= a.min_step_s <= MAX_MIN_STEP_S,
        f"--min-step-s must be in [0, {MAX_MIN_STEP_S:g}], got {a.min_step_s}",
    )
    cpus = None
    if a.cpus:
        try:
            cpus = tuple(int(c) for c in a.cpus.split(","))
        except ValueError:
            raise OakInputError(f"--cpus must be comma-separated integers, got {a.cpus!r}") from None
    return WorkerConfig(
        job_dir=a.job_dir,
        model=a.model,
        target_steps=a.target_steps,
        batch_size=a.batch_size,
        ckpt_every=a.ckpt_every,
        world_size=a.world_size,
        rank=a.rank,
        local_rank=a.local_rank,
        master_addr=a.master_addr,
        master_port=a.master_port,
        rendezvous=a.rendezvous,
        data=a.data,
        seed=a.seed,
        width_mult=a.width_mult,
        lr=a.lr,
        momentum=a.momentum,
        weight_decay=a.weight_decay,
        device=a.device,
        threads=a.threads,
        cpus=cpus,
        keep=a.keep,
        status_interval_s=a.status_interval,
        pg_timeout_s=a.pg_timeout,
        min_step_s=a.min_step_s,
    )


# --------------------------------------------------------------------------------------------- RNG state


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """torch / numpy / python (and CUDA) RNG states as tensors, lists and numbers (``weights_only``-loadable)."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    version, py_state, gauss_next = random.getstate()
    cuda = None
    if device is not None and device.type == "cuda":
        cuda = torch.cuda.get_rng_state(device)
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": int(version), "state": [int(v) for v in py_state], "gauss_next": gauss_next},
        "cuda": cuda,
    }


def restore_rng(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Inverse of ``capture_rng``."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["name"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))
    if device is not None and device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def seed_rank_rng(seed: int, rank: int, step: int, device: torch.device | None = None) -> None:
    """Seed all RNGs of ``rank`` from (seed, rank, step) — used at a fresh start and for ranks new after a resize."""
    s = np.random.SeedSequence([seed, rank, step]).generate_state(2, dtype=np.uint32)
    s64 = (int(s[0]) << 31) ^ int(s[1])
    torch.manual_seed(s64)
    np.random.seed(int(s[0]))
    random.seed(s64)
    if device is not None and device.type == "cuda":
        torch.cuda.manual_seed(s64)


# --------------------------------------------------------------------------------------------- small helpers


@dataclass
class Counters:
    """Cumulative cost ledger of a job across incarnations (seconds, counts)."""

    incarnations: int = 0
    t_ckpt_save_s: float = 0.0
    t_restore_s: float = 0.0
    n_ckpt_saves: int = 0
    corrupt_skipped: int = 0
    lost_steps: int = 0

    @property
    def restarts(self) -> int:
        return max(0, self.incarnations - 1)

    @classmethod
    def from_dict(cls, d: Any) -> Counters:
        c = cls()
        if isinstance(d, dict):
            for k, default in asdict(c).items():
                v = d.get(k)
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
                    setattr(c, k, type(default)(v))
        return c

    def merge_max(self, other: Counters) -> Counters:
        a, b = asdict(self), asdict(other)
        return Counters(**{k: max(a[k], b[k]) for k in a})


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _write_json(path: Path, obj: Any, *, durable: bool) -> None:
    data = (json.dumps(obj, allow_nan=False) + "\n").encode()
    checkpoint.write_bytes_atomic(path, data, durable=durable)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


class _StopFlag:
    """Set by SIGTERM/SIGINT; the training loop checkpoints at the next step boundary and exits 0."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None

    def handler(self, signum: int, frame: types.FrameType | None) -> None:
        self.requested = True  # nothing else here: no IO, no checkpoint from inside the handler
        self.signum = signum

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handler)
        signal.signal(signal.SIGINT, self.handler)
        if _EARLY_SIGNALS:  # received while the interpreter was still importing torch
            self.requested, self.signum = True, _EARLY_SIGNALS[-1]


def _loopback_ifname() -> str | None:
    with contextlib.suppress(OSError):
        for _, name in socket.if_nameindex():
            if name in ("lo", "lo0"):
                return name
    return None


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def _select_device(cfg: WorkerConfig) -> torch.device:
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if not want_cuda:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise OakInputError("--device cuda: no CUDA device is visible (check CUDA_VISIBLE_DEVICES)")
    idx = cfg.rank if cfg.local_rank is None else cfg.local_rank
    n = torch.cuda.device_count()
    if not 0 <= idx < n:
        raise OakInputError(f"--local-rank {idx}: only {n} CUDA device(s) visible")
    torch.cuda.set_device(idx)
    make_cuda_deterministic()
    return torch.device("cuda", idx)


@functools.lru_cache(maxsize=4)
def _device_info(kind: str, index: int | None) -> dict[str, Any]:
    return describe_device(torch.device(kind, index) if index is not None else torch.device(kind))


def describe_device(device: torch.device) -> dict[str, Any]:
    """The device a rank trains on, as status.json reports it: type, index and, on CUDA, the GPU's name and
    UUID (what ``CUDA_VISIBLE_DEVICES`` mapping is checked against: ``scripts/gpu-smoke``)."""
    out: dict[str, Any] = {"type": device.type, "index": device.index}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out["name"] = str(props.name)
        uuid = getattr(props, "uuid", None)
        out["uuid"] = None if uuid is None else str(uuid)
        out["deterministic"] = bool(torch.are_deterministic_algorithms_enabled())
    return out


def make_cuda_deterministic() -> None:
    """The settings under which a resumed CUDA run recomputes the same parameters as an uninterrupted one on
    the same GPU model, driver, library versions and world size: deterministic cuDNN kernels (no autotuning),
    no TF32, deterministic algorithms everywhere (an op without one raises instead of silently differing), and
    the cuBLAS workspace setting those require (set before the first cuBLAS call). NCCL's all-reduce is
    deterministic for a fixed rank count and topology; a resize changes W and therefore the summation order."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)


def _init_distributed(cfg: WorkerConfig, device: torch.device) -> None:
    """Join the process group; rank 0 binds the rendezvous store to ``master_addr`` only (not all interfaces).

    With ``--master-port 0`` rank 0 binds a port the OS picks and keeps it bound from then on, and publishes it
    in ``rendezvous.json`` with this incarnation's token: no port is chosen, released and bound again later,
    so no other process can take it in between (the race of picking a free port in the launcher)."""
    timeout = datetime.timedelta(seconds=cfg.pg_timeout_s)
    if _is_loopback(cfg.master_addr):
        lo = _loopback_ifname()
        if lo is not None:  # keep gloo / NCCL bootstrap sockets on loopback as well
            os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
            os.environ.setdefault("NCCL_SOCKET_IFNAME", lo)
    port = cfg.master_port
    if cfg.rank == 0:
        info = socket.getaddrinfo(cfg.master_addr, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        try:
            if port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(info[4])
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise RuntimeError(f"rendezvous: cannot bind {cfg.master_addr}:{port}: {exc}") from exc
        port = int(sock.getsockname()[1])
        if cfg.rendezvous is not None:
            _write_json(cfg.job_dir / RENDEZVOUS_FILE, {"token": cfg.rendezvous, "port": port}, durable=False)
        store = dist.TCPStore(  # type: ignore[attr-defined]
            cfg.master_addr, port, cfg.world_size, True, timeout, master_listen_fd=sock.detach()
        )
    else:
        if not port:
            port = _await_rendezvous(cfg)
        store = dist.TCPStore(cfg.master_addr, port, cfg.world_size, False, timeout)  # type: ignore[attr-defined]
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=store, rank=cfg.rank, world_size=cfg.world_size, timeout=timeout)


def _await_rendezvous(cfg: WorkerConfig) -> int:
    """The port rank 0 published for this incarnation's token (polled; a file left by an earlier incarnation
    carries another token and is ignored)."""
    path = cfg.job_dir / RENDEZVOUS_FILE
    deadline = time.monotonic() + cfg.pg_timeout_s
    while True:
        obj = _read_json(path)
        if isinstance(obj, dict) and obj.get("token") == cfg.rendezvous and isinstance(obj.get("port"), int):
            return int(obj["port"])
        if time.monotonic() >= deadline:
            raise RuntimeError(f"rendezvous: rank 0 did not publish its port in {path} within {cfg.pg_timeout_s:g} s")
        time.sleep(0.05)


def _open_loss_log(path: Path) -> TextIO:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    fh = os.fdopen(fd, "a", encoding="utf-8", buffering=1 << 16)
    size = os.fstat(fd).st_size
    if size == 0:
        fh.write("step,loss,incarnation,time\n")
    else:
        with open(path, "rb") as r:  # a SIGKILL may have cut the last line: terminate it
            r.seek(size - 1)
            if r.read(1) != b"\n":
                fh.write("\n")
    return fh


# --------------------------------------------------------------------------------------------- the worker


@dataclass
class _Run:
    cfg: WorkerConfig
    device: torch.device
    model: nn.Module
    optimizer: MomentumSGD
    dataset: Dataset
    started_at: float = field(default_factory=time.time)
    t_startup_s: float | None = None
    step: int = 0
    samples_seen: int = 0
    last_ckpt_step: int | None = None
    resumed_from: int | None = None
    counters: Counters = field(default_factory=Counters)
    loss: float | None = None
    state: str = "starting"
    window_t: float = field(default_factory=time.perf_counter)
    window_samples: int = 0
    window_step: int | None = None
    samples_per_s: float | None = None
    last_status_t: float = 0.0

    @property
    def params(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    @property
    def float_buffers(self) -> list[torch.Tensor]:
        return [b for b in self.model.buffers() if b.dtype.is_floating_point]

    @property
    def is_rank0(self) -> bool:
        return self.cfg.rank == 0

    @property
    def distributed(self) -> bool:
        return self.cfg.world_size > 1

    def meta(self) -> dict[str, Any]:
        return {
            "model": self.cfg.model,
            "width_mult": self.cfg.width_mult if self.cfg.model == "resnet18" else 1.0,
            "seed": self.cfg.seed,
            "data": "synthetic" if self.cfg.data is None else "cifar10",
        }

    # -- status -------------------------------------------------------------------------------------------
    def write_status(self, *, force: bool = False, done: bool = False, error: str | None = None) -> bool:
        """Rewrite status.json (rank 0) if forced or ``status_interval_s`` has passed; returns whether it did."""
        if not self.is_rank0:
            return False
        now = time.perf_counter()
        if not force and now - self.last_status_t < self.cfg.status_interval_s:
            return False
        timed: dict[str, Any] = {}
        if self.window_samples and now > self.window_t:
            self.samples_per_s = self.window_samples / (now - self.window_t)
            if self.window_step is not None and self.step > self.window_step:  # the job contract's step time
                timed = {
                    "steps_timed": self.step - self.window_step,
                    "step_time_s": (now - self.window_t) / (self.step - self.window_step),
                }
        self.window_step = self.step
        self.window_t, self.window_samples, self.last_status_t = now, 0, now
        status = {
            **timed,
            "total_steps": self.cfg.target_steps,
            "step": self.step,
            "target_steps": self.cfg.target_steps,
            "loss": _finite(self.loss),
            "samples_per_s": _finite(self.samples_per_s),
            "t_ckpt_save_s": self.counters.t_ckpt_save_s,
            "t_restore_s": self.counters.t_restore_s,
            "restarts": self.counters.restarts,
            "incarnation_started_at": self.started_at,
            "t_startup_s": self.t_startup_s,
            "pid": os.getpid(),
            "world_size": self.cfg.world_size,
            "done": done,
            "state": self.state,
            "incarnation": self.counters.incarnations,
            "last_ckpt_step": self.last_ckpt_step,
            "resumed_from_step": self.resumed_from,
            "n_ckpt_saves": self.counters.n_ckpt_saves,
            "corrupt_skipped": self.counters.corrupt_skipped,
            "lost_steps": self.counters.lost_steps,
            "batch_size": self.cfg.batch_size,
            "model": self.cfg.model,
            "device": _device_info(self.device.type, self.device.index),
            "updated_at": time.time(),
        }
        if error is not None:
            status["error"] = error
        if not oak.job.fenced():  # a newer incarnation's status is not this one's to overwrite
            _write_json(self.cfg.job_dir / STATUS_FILE, status, durable=False)
        return True

    # -- checkpointing ------------------------------------------------------------------------------------
    def save_checkpoint(self, loss_log: TextIO | None) -> None:
        """Collective when W > 1 (gathers every rank's RNG state); rank 0 writes."""
        t0 = time.perf_counter()
        rng = capture_rng(self.device)
        per_rank: list[Any] = [rng]
        if self.distributed:
            per_rank = [None] * self.cfg.world_size
            dist.all_gather_object(per_rank, rng)
        if self.is_rank0:
            if loss_log is not None:
                loss_log.flush()  # every step up to the checkpoint is in loss.csv before the checkpoint exists
            state = {
                "format": CKPT_FORMAT,
                "step": self.step,
                "samples_seen": self.samples_seen,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": {"world_size": self.cfg.world_size, "per_rank": per_rank},
                "meta": self.meta(),
                "counters": asdict(self.counters),
            }
            checkpoint.save(self.cfg.job_dir, state, self.step, keep=self.cfg.keep)
            self.counters.t_ckpt_save_s += time.perf_counter() - t0
            self.counters.n_ckpt_saves += 1
            _write_json(self.cfg.job_dir / COUNTERS_FILE, asdict(self.counters), durable=True)
        self.last_ckpt_step = self.step

    def restore(self) -> None:
        """Load the newest valid checkpoint (every rank reads it) and update the ledger (rank 0)."""
        t0 = time.perf_counter()
        loaded, info = checkpoint.scan_latest(self.cfg.job_dir)
        prior = Counters()
        if loaded is not None:
            st = loaded.state
            if st.get("format") != CKPT_FORMAT:
                raise OakInputError(f"{info.path}: checkpoint format {st.get('format')!r}, expected {CKPT_FORMAT}")
            if st.get("meta") != self.meta():
                raise OakInputError(f"{info.path}: checkpoint of {st.get('meta')}, but this worker runs {self.meta()}")
            self.model.load_state_dict(st["model"])
            self.optimizer.load_state_dict(st["optimizer"])
            self.step = self.resumed_from = self.last_ckpt_step = int(st["step"])
            self.samples_seen = int(st["samples_seen"])
            per_rank = st["rng"]["per_rank"]
            if self.cfg.rank < len(per_rank):
                restore_rng(per_rank[self.cfg.rank], self.device)
            else:
                seed_rank_rng(self.cfg.seed, self.cfg.rank, self.step, self.device)
            prior = Counters.from_dict(st.get("counters"))
        else:
            seed_rank_rng(self.cfg.seed, self.cfg.rank, 0, self.device)
        t_restore = time.perf_counter() - t0
        if self.distributed:  # all ranks must resume from the same checkpoint
            steps: list[Any] = [None] * self.cfg.world_size
            dist.all_gather_object(steps, self.step)
            if len(set(steps)) != 1:
                raise RuntimeError(f"ranks resumed from different checkpoint steps: {steps}")
        if self.is_rank0:
            ledger = Counters.from_dict(_read_json(self.cfg.job_dir / COUNTERS_FILE)).merge_max(prior)
            ledger.incarnations += 1
            if loaded is not None or info.corrupt_skipped:
                ledger.t_restore_s += t_restore
            ledger.corrupt_skipped += info.corrupt_skipped
            ledger.lost_steps += info.lost_steps
            self.counters = ledger
            _write_json(self.cfg.job_dir / COUNTERS_FILE, asdict(ledger), durable=True)
            print(
                f"[oak.worker] incarnation {ledger.incarnations} pid {os.getpid()} W={self.cfg.world_size}: "
                f"resumed from step {self.resumed_from} ({t_restore:.3f} s); {json.dumps(info.as_dict())}",
                flush=True,
            )

    # -- training -----------------------------------------------------------------------------------------
    def agree_stop(self, flag: bool) -> bool:
        if not self.distributed:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t)
        return bool(t.item() > 0)

    def sync_from_rank0(self, tensors: list[torch.Tensor]) -> None:
        """Broadcast ``tensors`` (same dtype) from rank 0 in one flat collective; no-op when W = 1."""
        if not self.distributed or not tensors:
            return
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])
            dist.broadcast(flat, src=0)
            offset = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[offset : offset + n].view_as(t))
                offset += n

    def train_step(self, stream: SampleStream, stop: _StopFlag) -> bool:
        """One optimiser step on the global batch; returns whether any rank was asked to stop.

        W > 1: rank 0's BatchNorm statistics are broadcast before the forward pass (as DDP does), then the
        gradients of the per-rank sums, the loss and the stop flags are summed in one all-reduce, so every rank
        applies the gradient of the mean loss over the global batch — exact also for unequal shards.
        """
        cfg = self.cfg
        started = time.monotonic()
        off, size = shard(cfg.batch_size, cfg.world_size, cfg.rank)
        x, y = self.dataset.batch(stream.indices(self.samples_seen + off, size))
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.sync_from_rank0(self.float_buffers)
        self.model.train()
        loss_sum = nn.functional.cross_entropy(self.model(x), y, reduction="sum")
        (loss_sum / cfg.batch_size).backward()  # type: ignore[no-untyped-call]
        stopping = stop.requested
        loss_total = float(loss_sum.detach().item())
        if self.distributed:
            with torch.no_grad():
                grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
                extra = torch.tensor([loss_total, 1.0 if stopping else 0.0], device=self.device)
                flat = torch.cat([g.reshape(-1).float() for g in grads] + [extra])
                dist.all_reduce(flat)
                offset = 0
                for p, g in zip(self.params, grads, strict=True):
                    n = g.numel()
                    g.copy_(flat[offset : offset + n].view_as(g))
                    p.grad = g
                    offset += n
                loss_total, stopping = float(flat[-2].item()), bool(flat[-1].item() > 0)
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.step += 1
        self.samples_seen += cfg.batch_size
        self.window_samples += cfg.batch_size
        self.loss = loss_total / cfg.batch_size
        if cfg.min_step_s > 0:  # pad the step (--min-step-s); a stop signal cuts the padding short
            deadline = started + cfg.min_step_s
            while not stop.requested and (left := deadline - time.monotonic()) > 0:
                time.sleep(min(left, 0.05))
        return stopping


def params_digest(model: nn.Module) -> str:
    """SHA-256 of the model's parameters (names, dtypes, shapes and bytes, in registration order).

    Buffers are left out: each rank's BatchNorm running statistics differ until the next step's broadcast.
    """
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        t = p.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _log_digest(run: _Run, why: str) -> str:
    digest = params_digest(run.model)
    print(f"[oak.worker] rank {run.cfg.rank} {why} at step {run.step} params_sha256 {digest}", flush=True)
    return digest


def _finish(run: _Run) -> None:
    digest = _log_digest(run, "done")
    if run.is_rank0:
        _write_json(
            run.cfg.job_dir / DONE_FILE,
            {
                "step": run.step,
                "target_steps": run.cfg.target_steps,
                "finished_at": time.time(),
                "params_sha256": digest,
            },
            durable=True,
        )
        checkpoint.fsync_dir(run.cfg.job_dir)
    run.state = "done"
    run.write_status(force=True, done=True)


def run_worker(cfg: WorkerConfig) -> int:
    """Train until ``target_steps`` or a stop signal; returns the process exit status."""
    started_at = _MAIN_STARTED_AT if _MAIN_STARTED_AT is not None else time.time()
    stop = _StopFlag()
    stop.install()
    if cfg.cpus is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cfg.cpus))
    threads = cfg.threads
    if threads is None:
        env_threads = os.environ.get("OMP_NUM_THREADS", "")
        threads = int(env_threads) if env_threads.isdigit() else 1
    torch.set_num_threads(max(1, threads))
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    cfg.job_dir.mkdir(mode=0o700, exist_ok=True)
    device = _select_device(cfg)
    dataset = synthetic(cfg.seed) if cfg.data is None else load_cifar10(cfg.data)
    if cfg.world_size > 1:
        _init_distributed(cfg, device)
    run: _Run | None = None
    loss_log: TextIO | None = None
    try:
        torch.manual_seed(cfg.seed)  # identical initial parameters on every rank
        model: nn.Module = build_model(cfg.model, width_mult=cfg.width_mult).to(device)
        optimizer = MomentumSGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        run = _Run(cfg=cfg, device=device, model=model, optimizer=optimizer, dataset=dataset, started_at=started_at)
        run.restore()
        run.sync_from_rank0(run.params + run.float_buffers)
        if run.is_rank0:
            loss_log = _open_loss_log(cfg.job_dir / LOSS_FILE)
            done_marker = cfg.job_dir / DONE_FILE
            if run.step < cfg.target_steps:
                done_marker.unlink(missing_ok=True)  # target raised since the last finish
        stream = SampleStream(len(dataset), cfg.seed)
        run.state = "running"
        run.t_startup_s = time.time() - started_at
        run.write_status(force=True)
        if run.step >= cfg.target_steps:
            _finish(run)
            return EXIT_OK
        stopping = run.agree_stop(stop.requested)
        while not stopping:
            stopping = run.train_step(stream, stop)
            if loss_log is not None:
                loss_log.write(f"{run.step},{run.loss!r},{run.counters.incarnations},{time.time():.3f}\n")
            if run.step >= cfg.target_steps:
                if run.last_ckpt_step != run.step:
                    run.save_checkpoint(loss_log)
                if loss_log is not None:
                    loss_log.flush()
                _finish(run)
                if run.distributed:
                    dist.barrier()
                return EXIT_OK
            if run.step % cfg.ckpt_every == 0 or stopping:
                run.save_checkpoint(loss_log)
                run.write_status(force=True)
            elif run.write_status() and loss_log is not None:
                loss_log.flush()
        # Stop requested: the state at this step boundary is checkpointed (or was already; step 0 of a fresh start
        # needs none — it is re-created from the seed).
        if run.last_ckpt_step != run.step and run.step > 0:
            run.save_checkpoint(loss_log)
        if loss_log is not None:
            loss_log.flush()
        run.state = "stopped"
        run.write_status(force=True)
        if run.distributed:
            dist.barrier()  # exit 0 on any rank means the checkpoint is durable
        _log_digest(run, f"stopped by signal {stop.signum}")
        return EXIT_OK
    except BaseException as exc:
        if run is not None:
            run.state = "failed"
            with contextlib.suppress(Exception):
                run.write_status(force=True, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if loss_log is not None:
            with contextlib.suppress(Exception):
                loss_log.close()
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    try:
        cfg = parse_args(argv)
        return run_worker(cfg)
    except OakInputError as exc:
        print(f"oak worker: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_INPUT
    except oak.job.Fenced as exc:
        print(f"oak worker: fenced: {exc}; exiting without writing", file=sys.stderr, flush=True)
        return EXIT_FENCED
    except Exception as exc:
        print(f"oak worker: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        import traceback

        traceback.print_exc()
        return EXIT_FAILED


def _leave_exit_status(code: int) -> None:
    """Leave this rank's exit status in its job directory (``oak.runtime.procs``): a scheduler that adopted the
    rank after a restart, not its parent, learns from it how the rank ended (launched under the job contract's
    environment only)."""
    job_dir, rank = os.environ.get("OAK_JOB_DIR"), os.environ.get("OAK_RANK", "")
    if job_dir and rank.isdigit() and not oak.job.fenced():  # a fenced rank's status is not the job's
        from oak.runtime.procs import write_exit_status

        with contextlib.suppress(OSError):
            write_exit_status(job_dir, int(rank), os.getpid(), code)


if __name__ == "__main__":
    _code = main()
    _leave_exit_status(_code)
    sys.exit(_code)
