"""Paired comparisons: policies × failure rates × seeds, run in a process pool."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oak.engine.metrics import RunResult
from oak.engine.rules import PhysicsOptions
from oak.model.cluster import cluster_preset
from oak.policies import make_policy
from oak.sim.simulator import Simulator
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


def run_one(spec: RunSpec) -> RunResult:
    """Run one spec (reusing this process's simulator for the same workload, cluster and physics)."""
    key = (spec.workload, spec.cluster, spec.physics)
    sim = _SIMULATORS.get(key)
    if sim is None:
        sim = Simulator(load_workload(spec.workload), cluster_preset(spec.cluster), physics=spec.physics)
        _SIMULATORS[key] = sim
    policy = make_policy(spec.policy, **{"seed": spec.seed, **dict(spec.policy_params)})
    return sim.run(policy, spec.failure_rate, spec.seed)


def run_many(
    specs: Sequence[RunSpec],
    workers: int | None = None,
    progress: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Run every spec, in a process pool when workers > 1; results come back in the order of ``specs``."""
    workers = workers if workers is not None else max(1, min(len(specs), os.cpu_count() or 1))
    results: list[RunResult | None] = [None] * len(specs)
    if workers <= 1 or len(specs) <= 1:
        for i, s in enumerate(specs):
            results[i] = run_one(s)
            if progress:
                progress(results[i])  # type: ignore[arg-type]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run_one, s): i for i, s in enumerate(specs)}
            for fut in as_completed(futures):
                res = fut.result()
                results[futures[fut]] = res
                if progress:
                    progress(res)
    return [r for r in results if r is not None]


def summarise(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per (workload, policy, failure rate): means over seeds of each run's mean/max JCT etc., with a 95 % CI
    half-width of the mean JCT (normal approximation over seeds)."""
    groups: dict[tuple[str, str, float], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.workload, r.policy, r.failure_rate), []).append(r)
    rows = []
    for (wl, pol, lam), runs in groups.items():
        s = [r.summary() for r in runs]
        means = np.array([x["mean_jct_s"] for x in s])
        ci = 1.96 * means.std(ddof=1) / np.sqrt(len(means)) if len(means) > 1 else 0.0
        rows.append(
            {
                "workload": wl,
                "policy": pol,
                "failure_rate": lam,
                "seeds": len(runs),
                "mean_jct_s": float(means.mean()),
                "mean_jct_ci95_s": float(ci),
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
