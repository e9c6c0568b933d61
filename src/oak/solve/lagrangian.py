"""Lagrangian (per-GPU-type price) method for large rounds: a feasible allocation and a certified bound.

Relaxing the capacity constraints with prices λ_t ≥ 0 (one per GPU type) gives, for any λ, the upper bound

    L(λ) = Σ_t λ_t·R_t + Σ_i max(0, max_j (v_ij − λ_t(j)·w_j))  ≥  the optimum of the round's problem.

L is convex and piecewise linear; we minimise it by cyclic bisection on each price's subgradient
R_t − Σ_i w_j*(i) [j*(i) of type t]. The primal allocation takes each job's best configuration at the final
prices, repairs overloaded types by dropping the chosen configuration of least value per GPU (falling back to
the job's best configuration that still fits), then fills leftover GPUs greedily. The certified optimality gap
is (L(λ) − objective) / max(|L(λ)|, 1e-12).

Status: a building block for the [scale] issue, not yet used by ``solve_assignment``: measured on this 2-core
machine it certifies gaps of ~1e-7 at 1,000 jobs × 3 types but takes ~2.4 s there (HiGHS: ~18.6 s), far from
the 50 ms goal; the price search (a full dual evaluation per bisection step) is what needs replacing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import FloatArray, IntArray
from oak.solve.assignment import AssignmentProblem


@dataclass(frozen=True, eq=False)
class LagrangianResult:
    """choice: (J,) configuration per job (−1: none); objective: Σ chosen values; bound: L(λ) ≥ optimum;
    prices: λ per GPU type (value per GPU)."""

    choice: IntArray
    objective: float
    bound: float
    prices: FloatArray

    @property
    def gap(self) -> float:
        return (self.bound - self.objective) / max(abs(self.bound), 1e-12)


def dual_value(problem: AssignmentProblem, prices: FloatArray) -> tuple[float, IntArray]:
    """L(λ) and each job's best configuration at these prices (−1 when no configuration has positive value)."""
    reduced = np.where(
        problem.valid, problem.value - prices[problem.gpu_type][None, :] * problem.gpus[None, :], -np.inf
    )
    best = reduced.argmax(axis=1)
    top = reduced[np.arange(len(best)), best]
    chosen = np.where(top > 0, best, -1)
    return float(prices @ problem.capacity + np.maximum(top, 0.0).sum()), chosen


def _usage(problem: AssignmentProblem, choice: IntArray) -> IntArray:
    used = np.zeros(len(problem.capacity), dtype=np.int64)
    rows = choice >= 0
    np.add.at(used, problem.gpu_type[choice[rows]], problem.gpus[choice[rows]])
    return used


def solve_lagrangian(problem: AssignmentProblem, passes: int = 30, iterations: int = 60) -> LagrangianResult:
    """Feasible allocation, objective and certified upper bound (no forced jobs: apply them beforehand)."""
    n_types = len(problem.capacity)
    positive = np.where(problem.valid, problem.value, 0.0).clip(min=0.0)
    price_hi = np.zeros(n_types)
    for t in range(n_types):
        cols = problem.gpu_type == t
        if cols.any():
            price_hi[t] = float((positive[:, cols] / problem.gpus[cols][None, :]).max(initial=0.0)) + 1.0
    prices = np.zeros(n_types)
    best_bound, _ = dual_value(problem, prices)
    best_prices = prices.copy()
    for _ in range(passes):
        before = best_bound
        for t in range(n_types):
            lo, hi = 0.0, price_hi[t]
            for _ in range(iterations):
                mid = 0.5 * (lo + hi)
                prices[t] = mid
                value, chosen = dual_value(problem, prices)
                if value < best_bound:
                    best_bound, best_prices = value, prices.copy()
                if _usage(problem, chosen)[t] > problem.capacity[t]:
                    lo = mid  # subgradient R_t − usage < 0: raise the price
                else:
                    hi = mid
            prices[t] = hi
            value, _ = dual_value(problem, prices)
            if value < best_bound:
                best_bound, best_prices = value, prices.copy()
            prices = best_prices.copy()
        if before - best_bound <= 1e-12 * max(abs(best_bound), 1.0):
            break
    _, choice = dual_value(problem, best_prices)
    choice = _repair(problem, choice)
    choice = _fill(problem, choice)
    objective = float(problem.value[np.flatnonzero(choice >= 0), choice[choice >= 0]].sum())
    return LagrangianResult(choice=choice, objective=objective, bound=best_bound, prices=best_prices)


def _repair(problem: AssignmentProblem, choice: IntArray) -> IntArray:
    """Drop, per overloaded type, the chosen configurations of least value per GPU until it fits."""
    choice = choice.copy()
    used = _usage(problem, choice)
    for t in np.flatnonzero(used > problem.capacity):
        rows = np.flatnonzero((choice >= 0) & (problem.gpu_type[np.maximum(choice, 0)] == t))
        density = problem.value[rows, choice[rows]] / problem.gpus[choice[rows]]
        for i in rows[np.argsort(density, kind="stable")]:
            if used[t] <= problem.capacity[t]:
                break
            used[t] -= problem.gpus[choice[i]]
            choice[i] = -1
    return choice


def _fill(problem: AssignmentProblem, choice: IntArray) -> IntArray:
    """Greedy improvement: repeatedly take the move (assign or upgrade a job) of largest value gain that fits."""
    choice = choice.copy()
    free = problem.capacity - _usage(problem, choice)
    current = np.where(choice >= 0, problem.value[np.arange(len(choice)), np.maximum(choice, 0)], 0.0)
    held = np.where(choice >= 0, problem.gpus[np.maximum(choice, 0)], 0)
    held_type = np.where(choice >= 0, problem.gpu_type[np.maximum(choice, 0)], -1)
    while True:
        extra = problem.gpus[None, :] - np.where(held_type[:, None] == problem.gpu_type[None, :], held[:, None], 0)
        # Within a type a move needs only the extra GPUs; a move to another type needs all of the new ones.
        fits = problem.valid & (extra <= free[problem.gpu_type][None, :])
        gain = np.where(fits, problem.value - current[:, None], -np.inf)
        i, j = np.unravel_index(int(np.argmax(gain)), gain.shape)
        if not np.isfinite(gain[i, j]) or gain[i, j] <= 1e-12:
            return choice
        if held_type[i] >= 0:
            free[held_type[i]] += held[i]
        t = problem.gpu_type[j]
        free[t] -= problem.gpus[j]
        choice[i], current[i], held[i], held_type[i] = j, problem.value[i, j], problem.gpus[j], t
