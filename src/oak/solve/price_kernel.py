"""The price search of :func:`oak.solve.lagrangian.minimise_dual` as one compiled loop (numba).

Coordinate descent over the per-type prices with an exact line search: with the other prices fixed, each job's
demand for type t falls at the thresholds θ_ik = min(s_ik, λ*_i) of its hull increments, and the minimiser is the
threshold at which the demand, summed from the highest threshold down, first exceeds the type's capacity. The
kernel computes the same quantities in the same floating-point expressions as the NumPy code; it selects the
threshold by partitions (expected linear time) where NumPy sorts a window around the previous price first (the
answer is the same threshold value: the weights are GPU counts, whose sums are exact in any order), and it sums the dual value in NumPy's pairwise
order, so both stop after the same pass with the same prices (tests/test_warm_start.py). Imported only for large
rounds, so ``import oak`` does not load numba.
"""

from __future__ import annotations

import numba  # type: ignore[import-untyped]
import numpy as np

from oak.solve.pairwise_kernel import pairwise_sum


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _dual(lam: np.ndarray, capacity: np.ndarray, best: np.ndarray) -> float:
    """Σ_t λ_t·R_t + Σ_i max_t best[t, i], summed as the NumPy code does."""
    n_types, n_jobs = best.shape
    cost = np.empty(n_types)
    for t in range(n_types):
        cost[t] = lam[t] * capacity[t]
    fixed = pairwise_sum(cost, 0, n_types)
    top = np.empty(n_jobs)
    for i in range(n_jobs):
        m = best[0, i]
        for t in range(1, n_types):
            if best[t, i] > m:
                m = best[t, i]
        top[i] = m
    return float(fixed + pairwise_sum(top, 0, n_jobs))


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _best_row(hv: np.ndarray, hw: np.ndarray, t: int, lam_t: float, out: np.ndarray) -> None:
    _, h, n_jobs = hv.shape
    for i in range(n_jobs):
        m = hv[t, 0, i] - lam_t * hw[t, 0, i]
        for k in range(1, h):
            x = hv[t, k, i] - lam_t * hw[t, k, i]
            if x > m:
                m = x
        out[i] = m


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _line_search(
    hv: np.ndarray, hw: np.ndarray, slope: np.ndarray, dw: np.ndarray, t: int, outside: np.ndarray, cap: float
) -> float:
    _, h, n_jobs = hv.shape
    if h <= 1 or n_jobs == 0:
        return 0.0
    theta = np.empty((h - 1) * n_jobs)
    weight = np.empty((h - 1) * n_jobs)
    n = 0
    total = 0.0
    for i in range(n_jobs):
        leave = -np.inf
        for k in range(1, h):
            if hw[t, k, i] > 0:
                x = (hv[t, k, i] - outside[i]) / hw[t, k, i]
                if x > leave:
                    leave = x
        for k in range(h - 1):
            th = slope[t, k, i]
            if leave < th:
                th = leave
            if th > 0 and dw[t, k, i] > 0:
                theta[n] = th
                weight[n] = dw[t, k, i]
                total += dw[t, k, i]
                n += 1
    if total <= cap:
        return 0.0
    return _weighted_select(theta, weight, n, cap)


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _weighted_select(theta: np.ndarray, weight: np.ndarray, n: int, cap: float) -> float:
    """The threshold at which the weight, summed over ``theta[:n]`` from the highest down, first exceeds ``cap``
    (the weights sum above it). A selection by three-way partitions around a pivot (expected O(n)) instead of a
    sort: the answer is a threshold value, the same whatever the order among equal thresholds, and the partial sums
    are sums of whole GPU counts, exact in any order. Reorders ``theta[:n]`` and ``weight[:n]`` in place. A
    negative ``cap`` is exceeded by the first threshold: the highest."""
    if n == 0:
        return 0.0
    if cap < 0:
        top = theta[0]
        for j in range(1, n):
            if theta[j] > top:
                top = theta[j]
        return float(top)
    lo, hi = 0, n
    above = 0.0  # weight of the thresholds known to lie above the range lo:hi
    while True:
        a, b, c = theta[lo], theta[(lo + hi) // 2], theta[hi - 1]  # median of three
        pivot = max(min(a, b), min(max(a, b), c))
        # three-way partition of lo:hi: > pivot, == pivot, < pivot
        i, lt, gt = lo, lo, hi
        while i < gt:
            x = theta[i]
            if x > pivot:
                theta[i], theta[lt] = theta[lt], theta[i]
                weight[i], weight[lt] = weight[lt], weight[i]
                lt += 1
                i += 1
            elif x < pivot:
                gt -= 1
                theta[i], theta[gt] = theta[gt], theta[i]
                weight[i], weight[gt] = weight[gt], weight[i]
            else:
                i += 1
        w_gt = 0.0
        for j in range(lo, lt):
            w_gt += weight[j]
        if above + w_gt > cap:
            hi = lt
            continue
        w_eq = 0.0
        for j in range(lt, gt):
            w_eq += weight[j]
        if above + w_gt + w_eq > cap:
            return float(pivot)
        above += w_gt + w_eq
        lo = gt
        if lo >= hi:
            return 0.0  # cannot happen: the weights sum above the capacity


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def minimise_dual_kernel(
    hv: np.ndarray,
    hw: np.ndarray,
    slope: np.ndarray,
    dw: np.ndarray,
    capacity: np.ndarray,
    prices: np.ndarray,
    max_passes: int,
    rel_tol: float,
) -> tuple[np.ndarray, int]:
    """(λ, passes run): :func:`oak.solve.lagrangian.minimise_dual` on the hulls' arrays."""
    n_types, _, n_jobs = hv.shape
    lam = prices.copy()
    best = np.empty((n_types, n_jobs))
    for t in range(n_types):
        _best_row(hv, hw, t, lam[t], best[t])
    value = _dual(lam, capacity, best)
    passes = 0
    others = np.zeros(n_jobs)
    for p in range(1, max_passes + 1):
        passes = p
        before = value
        for t in range(n_types):
            for i in range(n_jobs):
                m = -np.inf
                for u in range(n_types):
                    if u != t and best[u, i] > m:
                        m = best[u, i]
                others[i] = m if n_types > 1 else 0.0
            lam[t] = _line_search(hv, hw, slope, dw, t, others, capacity[t])
            _best_row(hv, hw, t, lam[t], best[t])
        value = _dual(lam, capacity, best)
        if n_types == 1 or before - value <= rel_tol * max(abs(value), 1.0):
            break
    return lam, passes
