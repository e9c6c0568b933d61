"""Paired comparisons: policies × failure rates × seeds, run in a process pool."""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from oak.engine.metrics import RunResult, ci_half_width
from oak.engine.rules import PhysicsOptions
from oak.model.cluster import cluster_preset
from oak.policies import make_policy
from oak.sim.pool import WorkerDied, WorkerPool
from oak.sim.simulator import ProgressObserver, Simulator
from oak.solve.assignment import load_kernels
from oak.workloads import load_workload


@dataclass(frozen=True)
class RunSpec:
    """One simulation to run: everything that determines its result."""

    policy: str
    workload: str
    failure_rate: float
    seed: int
    cluster: str = "paper-12"
    physics: PhysicsOptions = PhysicsOptions()
    policy_params: tuple[tuple[str, Any], ...] = field(default=())


_SIMULATORS: dict[tuple[str, str, PhysicsOptions], Simulator] = {}


#: A sweep of at least this many runs loads the solver's compiled round kernels in its processes
#: (:func:`oak.solve.assignment.load_kernels`): numba's load, ~0.3–1 s a process, is paid back within a few
#: paper-scale runs (~0.1 ms a round saved); a shorter sweep keeps NumPy. The results are the same either way.
SWEEP_KERNELS_MIN = 8


def sweep_kernels(specs: Sequence[RunSpec]) -> bool:
    """Whether a sweep of ``specs`` loads the compiled round kernels (:data:`SWEEP_KERNELS_MIN`); loads them in this
    process when it does (a pool forked from it inherits them; workers started otherwise load them in the pool's
    initializer)."""
    if len(specs) < SWEEP_KERNELS_MIN:
        return False
    load_kernels()
    return True


def run_one_in_sweep(spec: RunSpec) -> RunResult:
    """:func:`run_one` in a process that runs a long sweep (a Ray worker): the compiled round kernels first."""
    load_kernels()
    return run_one(spec)


def run_one(spec: RunSpec, on_progress: ProgressObserver | None = None) -> RunResult:
    """Run one spec (reusing this process's simulator for the same workload, cluster and physics);
    ``on_progress`` as :meth:`Simulator.run`'s."""
    key = (spec.workload, spec.cluster, spec.physics)
    sim = _SIMULATORS.get(key)
    if sim is None:
        sim = Simulator(load_workload(spec.workload), cluster_preset(spec.cluster), physics=spec.physics)
        _SIMULATORS[key] = sim
    policy = make_policy(spec.policy, **{"seed": spec.seed, **dict(spec.policy_params)})
    return sim.run(policy, spec.failure_rate, spec.seed, on_progress=on_progress)


class LongestFirst:
    """The order in which a pool takes a sweep's runs: longest first (LPT), with run lengths learned as the sweep
    goes, so that no long run starts last and leaves the other workers idle.

    Runs that differ only in their seed form a group (same policy, workload, cluster, λ, physics) and take about
    the same time. The first run of each group not yet measured goes first (in the sweep's order); then the
    runs of measured groups, the group with the longest mean run time (``RunResult.wall_s``) first; runs of a
    group whose first run is still going come last. The order changes which worker runs what and when, never a
    result: each run is a pure function of its spec."""

    def __init__(self, specs: Sequence[RunSpec]) -> None:
        self._specs = list(specs)
        self._left: dict[RunSpec, deque[int]] = {}  # per group, in the sweep's order: its runs not yet taken
        for i, spec in enumerate(self._specs):
            self._left.setdefault(self.group(spec), deque()).append(i)
        self._count = len(self._specs)
        self._probing: set[RunSpec] = set()
        self._walls: dict[RunSpec, list[float]] = {}

    def __len__(self) -> int:
        return self._count

    @staticmethod
    def group(spec: RunSpec) -> RunSpec:
        return replace(spec, seed=0)

    def _next_group(self) -> RunSpec:
        groups = [g for g, left in self._left.items() if left]
        fresh = [g for g in groups if g not in self._walls and g not in self._probing]
        if fresh:
            return fresh[0]
        measured = [g for g in groups if g in self._walls]
        if measured:  # max keeps the first of equals: the sweep's order
            return max(measured, key=lambda g: sum(self._walls[g]) / len(self._walls[g]))
        return groups[0]

    def pop(self) -> int:
        """The position (in the sweep) of the run to start next."""
        g = self._next_group()
        if g not in self._walls:
            self._probing.add(g)
        self._count -= 1
        return self._left[g].popleft()

    def observed(self, spec: RunSpec, wall_s: float) -> None:
        """A run of ``spec`` took ``wall_s`` seconds."""
        g = self.group(spec)
        self._probing.discard(g)
        self._walls.setdefault(g, []).append(float(wall_s))


class InOrder(LongestFirst):
    """The sweep's own order (the reference :class:`LongestFirst` is measured against, ``oak bench sweep``)."""

    def pop(self) -> int:
        self._count -= 1
        return len(self._specs) - self._count - 1


ORDERS: dict[str, type[LongestFirst]] = {"longest-first": LongestFirst, "in-order": InOrder}


def run_pool(
    specs: Sequence[RunSpec],
    workers: int,
    done: Callable[[int, RunResult], None],
    order_name: str = "longest-first",
) -> None:
    """Run ``specs`` on ``workers`` processes (:class:`oak.sim.pool.WorkerPool`), longest first
    (:class:`LongestFirst`, or another of ``ORDERS``); ``done(i, result)`` as each finishes. A run is handed out
    only when a worker is free, so the order is decided as runs end. An exception (Ctrl-C, a failed run, a callback
    that raised) ends the workers at once: the runs still going are abandoned, not waited for (a stress run takes
    minutes), and nothing half-done is delivered."""
    order = ORDERS[order_name](specs)
    kernels = sweep_kernels(specs)
    with WorkerPool(max(1, min(workers, len(specs))), run_one, _worker_start, (kernels,)) as pool:
        while order or pool.busy:
            while order and pool.idle:
                i = order.pop()
                pool.submit(i, specs[i])
            try:
                for i, res in pool.results():
                    order.observed(specs[i], res.wall_s)
                    done(i, res)
            except WorkerDied as exc:  # say which run it was
                s = specs[exc.task]
                running = f"{s.policy} on {s.workload} ({s.cluster}) at λ = {s.failure_rate:g}, seed {s.seed}"
                raise WorkerDied(exc.pid, exc.exitcode, exc.task, running) from None


def _worker_start(kernels: bool) -> None:
    """A pool worker's start: with ``kernels``, the compiled round kernels are loaded (a forked worker has them
    from the parent already)."""
    if kernels:
        load_kernels()


def run_many(
    specs: Sequence[RunSpec],
    workers: int | None = None,
    progress: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Run every spec, in a process pool when workers > 1 (longest first, :func:`run_pool`); results come back
    in the order of ``specs``."""
    workers = workers if workers is not None else max(1, min(len(specs), os.cpu_count() or 1))
    results: list[RunResult | None] = [None] * len(specs)

    def done(i: int, res: RunResult) -> None:
        results[i] = res
        if progress:
            progress(res)

    if workers <= 1 or len(specs) <= 1:
        sweep_kernels(specs)
        for i, s in enumerate(specs):
            done(i, run_one(s))
    else:
        run_pool(specs, workers, done)
    return [r for r in results if r is not None]


def summarise(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per (workload, policy, failure rate): means over seeds of each run's mean/max JCT etc., with a 95 % CI
    half-width of the mean JCT (Student's t over seeds; None with one seed); ``unfinished_jobs`` is the count over
    all the seeds' runs."""
    groups: dict[tuple[str, str, float], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.workload, r.policy, r.failure_rate), []).append(r)
    rows = []
    for (wl, pol, lam), runs in groups.items():
        s = [r.summary() for r in runs]
        means = np.array([x["mean_jct_s"] for x in s])
        half = ci_half_width(means.std(ddof=1), len(means)) if len(means) > 1 else math.nan
        ci = None if math.isnan(half) else half
        rows.append(
            {
                "workload": wl,
                "policy": pol,
                "failure_rate": lam,
                "seeds": len(runs),
                "mean_jct_s": float(means.mean()),
                "mean_jct_ci95_s": ci,
                "max_jct_s": float(np.mean([x["max_jct_s"] for x in s])),
                "p99_jct_s": float(np.mean([x["p99_jct_s"] for x in s])),
                "restarts_per_job": float(np.mean([x["restarts_per_job"] for x in s])),
                "decision_ms_mean": float(np.mean([x["decision_ms_mean"] for x in s])),
                "unfinished_jobs": int(sum(x["unfinished_jobs"] for x in s)),
                "lost_gpu_hours": float(np.mean([x["lost_gpu_hours"] for x in s])),
                "effective_training": float(np.mean([x["effective_training"] for x in s])),
                **(
                    {"node_failures": float(np.mean([common_node_failures(r, results) for r in runs]))}
                    if any(r.failure_model for r in runs)
                    else {}
                ),
            }
        )
    return rows


def common_node_failures(run: RunResult, results: Sequence[RunResult]) -> int:
    """The run's hardware events up to the earliest end among the runs paired with it (same workload, failure
    rate and seed): a count that must be equal for every policy (the events do not depend on the policy)."""
    peers = [r for r in results if (r.workload, r.failure_rate, r.seed) == (run.workload, run.failure_rate, run.seed)]
    end = min(r.end_time_s for r in peers)
    return sum(1 for t in run.hardware_events if t <= end)
