"""Run the missing specs of a sweep on a local process pool or on a Ray cluster, storing results as they come."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from oak.engine.metrics import RunResult
from oak.errors import OakInputError
from oak.policies import policy_spec
from oak.reproduce.store import ResultsStore
from oak.sim.compare import SWEEP_KERNELS_MIN, RunSpec, run_one, run_one_in_sweep, run_pool, sweep_kernels

FLUSH_EVERY_S = 15.0
BACKENDS = ("local", "ray")

#: Policies with numba kernels: compiled once before the pool starts (see :func:`warm_compiled`).
_COMPILED = ("pollux", "hybrid-oak")
_WORKLOAD_COST = {"stress": 6.0, "congestion": 3.0, "ckpt-variance": 2.0, "medium": 1.5, "small": 0.3}


class Terminated(KeyboardInterrupt):
    """SIGTERM during a sweep (what ``timeout``, SLURM and ``docker stop`` send): handled as Ctrl-C is, the
    complete runs stored before it propagates. A KeyboardInterrupt, so that whatever handles Ctrl-C handles it."""

    signum = signal.SIGTERM


class _SigtermHandler:
    """Raises :class:`Terminated` once, in the process that installed it (a second SIGTERM does not cut the flush
    that follows the first)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.owner:  # a forked process that kept the handler: SIGTERM's default, it ends
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if not self.received:
            self.received = True
            raise Terminated()


def _default_sigterm_in_child() -> None:
    """A process forked during a sweep (the pool's workers) ends on SIGTERM at once, as before: the handler that
    raises Terminated is the parent's alone."""
    if isinstance(signal.getsignal(signal.SIGTERM), _SigtermHandler):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


os.register_at_fork(after_in_child=_default_sigterm_in_child)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the duration of the block, SIGTERM raises :class:`Terminated` in the main thread (as Ctrl-C raises
    KeyboardInterrupt); the previous handler is restored afterwards. Another error after a SIGTERM (a pool worker
    that the same signal ended first) becomes Terminated too. Off the main thread, where handlers cannot be
    installed, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _SigtermHandler()
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Exception as exc:
        if handler.received:
            raise Terminated() from exc
        raise
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def estimated_cost(spec: RunSpec) -> float:
    """A rough relative cost, to start the longest runs first (better packing of the pool)."""
    budget = dict(spec.policy_params)
    scale = 1.0
    if spec.policy == "pollux":
        scale = budget.get("population", 100) * budget.get("generations", 100) / 10000.0
    return (
        policy_spec(spec.policy).cost * scale * _WORKLOAD_COST.get(spec.workload, 2.0) * (1.0 + 5.0 * spec.failure_rate)
    )


def execute(
    specs: Sequence[RunSpec],
    store: ResultsStore,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Callable[[RunSpec, RunResult], None] | None = None,
) -> int:
    """Run every spec not yet in ``store``; returns how many were run. Results are flushed to disk at least
    every 15 s, and when the sweep ends, however it ends: an interrupted sweep (Ctrl-C: KeyboardInterrupt;
    SIGTERM: :class:`Terminated`) keeps every complete run and resumes where it stopped."""
    if backend not in BACKENDS:
        raise OakInputError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    todo = sorted(store.missing(specs), key=estimated_cost, reverse=True)
    if not todo:
        return 0
    last = time.monotonic()

    def done(spec: RunSpec, result: RunResult) -> None:
        nonlocal last
        store.add(spec, result)
        if progress is not None:
            progress(spec, result)
        if time.monotonic() - last > FLUSH_EVERY_S:
            store.flush()
            last = time.monotonic()

    with sigterm_as_interrupt():
        if backend == "local":
            warm_compiled(todo)
        try:
            if backend == "ray":
                _run_ray(todo, workers, address, done)
            else:
                _run_local(todo, workers, done)
        finally:
            store.flush()
    return len(todo)


def warm_compiled(specs: Sequence[RunSpec]) -> None:
    """Compile the numba kernels the sweep needs once, in this process: numba writes them to its on-disk
    cache, so the pool's workers load them (~0.5 s) instead of each compiling them (~20 s)."""
    for name in sorted({s.policy for s in specs} & set(_COMPILED)):
        run_one(RunSpec(name, "small", 0.0, 0, policy_params=(("generations", 2), ("population", 4))))


def _run_local(todo: Sequence[RunSpec], workers: int | None, done: Callable[[RunSpec, RunResult], None]) -> None:
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n <= 1 or len(todo) == 1:
        sweep_kernels(todo)
        for spec in todo:
            done(spec, run_one(spec))
        return
    run_pool(todo, n, lambda i, res: done(todo[i], res))


def _run_ray(
    todo: Sequence[RunSpec], workers: int | None, address: str | None, done: Callable[[RunSpec, RunResult], None]
) -> None:
    try:
        import ray
    except ImportError as exc:
        raise OakInputError("--backend ray needs Ray: pip install 'oak-scheduler[ray]'") from exc
    started_here = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        else:
            ray.init(
                num_cpus=workers or os.cpu_count() or 1,
                object_store_memory=96 * 1024 * 1024,
                include_dashboard=False,
                ignore_reinit_error=True,
                log_to_driver=False,
            )
        started_here = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(run_one_in_sweep if len(todo) >= SWEEP_KERNELS_MIN else run_one)
        refs = {remote.remote(spec): spec for spec in todo}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=600.0)
            if not ready:
                raise RuntimeError("Ray: no simulation finished in 600 s; is the cluster alive?")
            for ref in ready:
                done(refs.pop(ref), ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
