"""Gavel's finish-time-fairness policy (reference §6), with 60 s rounds like every policy in the comparison.

Optimises min_X max_m (t_m + ρ_m/τ_m(X)) / (o_m + Σ_m/τ_m^iso): the largest ratio of a job's finish time
under time fractions X to its finish time on an isolated 1/J share of every GPU type. Solved exactly by
bisection on the ratio (closed-form feasibility for one GPU type, a HiGHS LP per step otherwise); time
fractions become allocations through Gavel's round-based priorities. Departs from Gavel in using 60 s
rounds, Sia's configurations for the rigid GPU count (the demand rounded down to one), and progress rates
from the simulator's goodput model instead of Gavel's throughput profiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import Allocation, FloatArray, IntArray, RoundSnapshot
from oak.policies.base import PolicyBase
from oak.policies.rigid import rigid_configs

NEW_JOB_PRIORITY = 1e9


@dataclass(frozen=True)
class FtfProblem:
    """Finish-time fairness inputs. throughput: (M, K) progress per second at the job's rigid GPU count on
    type k (0 = cannot run there); age_s, remaining, total, overhead_s: (M,); gpus: (M,) rigid GPU counts;
    capacity: (K,) GPUs per type."""

    throughput: FloatArray
    age_s: FloatArray
    remaining: FloatArray
    total: FloatArray
    overhead_s: FloatArray
    gpus: IntArray
    capacity: IntArray

    def isolated_throughput(self) -> FloatArray:
        """τ^iso: throughput on a 1/M slice of every type (rows scaled down to a total fraction ≤ 1)."""
        m = len(self.age_s)
        x = (self.capacity[None, :] / m) / self.gpus[:, None]
        x = x * (self.throughput > 0)
        rows = x.sum(axis=1)
        x = x / np.maximum(rows, 1.0)[:, None]
        return (self.throughput * x).sum(axis=1)  # type: ignore[no-any-return]

    def denominators(self) -> FloatArray:
        iso = self.isolated_throughput()
        with np.errstate(divide="ignore"):
            return self.overhead_s + np.where(iso > 0, self.total / iso, np.inf)

    def ratios(self, x: FloatArray) -> FloatArray:
        """Each job's finish-time ratio under time fractions ``x`` (M, K)."""
        tau = (self.throughput * x).sum(axis=1)
        with np.errstate(divide="ignore"):
            finish = self.age_s + np.where(tau > 0, self.remaining / tau, np.inf)
        return finish / self.denominators()


def _fractions_at(problem: FtfProblem, z: float, denom: FloatArray) -> FloatArray | None:
    """Time fractions meeting ratio ≤ z for every job, or None when infeasible."""
    slack = z * denom - problem.age_s
    if np.any(slack <= 0):
        return None
    need = problem.remaining / slack  # required throughput per job
    m, k = problem.throughput.shape
    if k == 1:
        thr = problem.throughput[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(thr > 0, need / thr, np.inf)
        if np.any(x > 1 + 1e-12) or float((problem.gpus * x).sum()) > problem.capacity[0] + 1e-9:
            return None
        return np.minimum(x, 1.0)[:, None]
    # LP feasibility: Σ_k T_mk x_mk ≥ need_m, Σ_k x_mk ≤ 1, Σ_m w_m x_mk ≤ W_k, x ≥ 0.
    n = m * k
    a_ub = []
    b_ub = []
    for j in range(m):
        row = np.zeros(n)
        row[j * k : (j + 1) * k] = -problem.throughput[j]
        a_ub.append(row)
        b_ub.append(-need[j])
        row = np.zeros(n)
        row[j * k : (j + 1) * k] = 1.0
        a_ub.append(row)
        b_ub.append(1.0)
    for t in range(k):
        row = np.zeros(n)
        row[t::k] = problem.gpus
        a_ub.append(row)
        b_ub.append(float(problem.capacity[t]))
    from scipy.optimize import linprog  # here, not at import: loading scipy.optimize slows every command

    res = linprog(np.zeros(n), A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=(0, 1), method="highs")
    if res.status != 0:
        return None
    return np.asarray(res.x).reshape(m, k)


def ftf_fractions(problem: FtfProblem, rel_tol: float = 1e-7) -> tuple[FloatArray, float]:
    """Time fractions X minimising the maximum finish-time ratio, and that ratio (bisection on the ratio)."""
    denom = problem.denominators()
    finite = np.isfinite(denom) & (problem.throughput.max(axis=1) > 0)
    if not finite.all():  # jobs that can run nowhere are left out of the fairness problem
        sub = FtfProblem(
            problem.throughput[finite],
            problem.age_s[finite],
            problem.remaining[finite],
            problem.total[finite],
            problem.overhead_s[finite],
            problem.gpus[finite],
            problem.capacity,
        )
        x_sub, z = ftf_fractions(sub, rel_tol) if finite.any() else (np.zeros((0, problem.capacity.size)), 0.0)
        x = np.zeros_like(problem.throughput)
        x[finite] = x_sub
        return x, z
    lo = float(np.max(problem.age_s / denom))
    hi = max(2.0 * lo, 1.0)
    best = _fractions_at(problem, hi, denom)
    while best is None:
        lo, hi = hi, hi * 2.0
        best = _fractions_at(problem, hi, denom)
    # relative tolerance, and an absolute floor for an optimum of 0 (lo = 0: e.g. jobs with no work left)
    while hi - lo > rel_tol * hi and hi > 1e-12:
        mid = 0.5 * (lo + hi)
        trial = _fractions_at(problem, mid, denom)
        if trial is None:
            lo = mid
        else:
            hi, best = mid, trial
    return best, hi


@dataclass(frozen=True)
class GavelPolicy(PolicyBase):
    """Gavel with finish-time fairness at each job's rigid GPU count (its demand)."""

    name: str = "gavel"

    def problem(self, snap: RoundSnapshot) -> tuple[FtfProblem, IntArray]:
        """The FTF problem of a round and each job's rigid configuration per GPU type (J, K; −1: none)."""
        cfg, rate = rigid_configs(snap)
        gpus = np.where(cfg >= 0, snap.config_gpus[np.maximum(cfg, 0)], 0).max(axis=1)
        problem = FtfProblem(
            throughput=rate,
            age_s=snap.age_s,
            remaining=snap.remaining_work,
            total=snap.total_work,
            overhead_s=snap.restart_penalty_s,
            gpus=np.maximum(gpus, 1),
            capacity=snap.capacity,
        )
        return problem, cfg

    def decide(self, snap: RoundSnapshot) -> Allocation:
        problem, cfg = self.problem(snap)
        x, z = ftf_fractions(problem)
        # Round-based priorities: fraction wanted / fraction of its life the job has run.
        held_gpus = np.maximum(problem.gpus, 1)
        received = snap.attained_gpu_s / held_gpus / np.maximum(snap.age_s, 1e-9)
        never_ran = snap.attained_gpu_s <= 0
        pairs = []
        values = np.full(snap.goodput.shape, -np.inf)
        for j in range(snap.num_jobs):
            for t in range(len(snap.capacity)):
                if cfg[j, t] < 0:
                    continue
                xs = float(x[j, t])
                prio = xs * NEW_JOB_PRIORITY if never_ran[j] else xs / max(float(received[j]), 1e-9)
                deficit = xs * float(snap.age_s[j]) - float(snap.attained_gpu_s[j] / held_gpus[j])
                values[j, cfg[j, t]] = prio
                pairs.append((-prio, -deficit, -xs, j, t))
        pairs.sort()
        free = snap.capacity.astype(np.int64).copy()
        choice = np.full(snap.num_jobs, -1, dtype=np.int64)
        for *_, j, t in pairs:
            c = cfg[j, t]
            if choice[j] < 0 and snap.config_gpus[c] <= free[t]:
                choice[j] = c
                free[t] -= snap.config_gpus[c]
        return Allocation(config=choice, objective=z, method="ftf-bisection", values=values, value_label="priority")
