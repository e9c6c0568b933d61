"""The price search of :func:`oak.solve.lagrangian.minimise_dual` as one compiled loop (numba).

Coordinate descent over the per-type prices with an exact line search: with the other prices fixed, each job's
demand for type t falls at the thresholds θ_ik = min(s_ik, λ*_i) of its hull increments, and the minimiser is the
threshold at which the demand, summed from the highest threshold down, first exceeds the type's capacity. The
kernel computes the same quantities in the same floating-point expressions as the NumPy code; it sorts all the
thresholds where NumPy first tries a window around the previous price (the answer is the same threshold value:
the weights are GPU counts, whose sums are exact in any order), and it sums the dual value in NumPy's pairwise
order, so both stop after the same pass with the same prices (tests/test_warm_start.py). Imported only for large
rounds, so ``import oak`` does not load numba.
"""

from __future__ import annotations

import numba  # type: ignore[import-untyped]
import numpy as np


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _block_sum(a: np.ndarray, lo: int, n: int) -> float:
    """NumPy's pairwise sum of a[lo:lo+n] for n ≤ 128: a plain loop below 8, else eight accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return float(res)


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _pairwise_sum(a: np.ndarray, lo: int, n: int) -> float:
    """Σ a[lo:lo+n] as NumPy's ``add.reduce`` sums a contiguous float64 array: blocks of at most 128 summed by
    :func:`_block_sum`, halves (cut at a multiple of 8) added pairwise — the recursion unrolled onto a stack."""
    if n <= 128:
        return _block_sum(a, lo, n)
    node_lo = np.empty(128, dtype=np.int64)
    node_n = np.empty(128, dtype=np.int64)
    node_done = np.zeros(128, dtype=np.bool_)
    values = np.empty(128)
    sp = 0
    vp = 0
    node_lo[0] = lo
    node_n[0] = n
    node_done[0] = False
    sp = 1
    while sp > 0:
        sp -= 1
        c_lo, c_n, done = node_lo[sp], node_n[sp], node_done[sp]
        if c_n <= 128:
            values[vp] = _block_sum(a, c_lo, c_n)
            vp += 1
        elif done:
            right = values[vp - 1]
            left = values[vp - 2]
            vp -= 2
            values[vp] = left + right
            vp += 1
        else:
            n2 = c_n // 2
            n2 -= n2 % 8
            node_lo[sp], node_n[sp], node_done[sp] = c_lo, c_n, True
            node_lo[sp + 1], node_n[sp + 1], node_done[sp + 1] = c_lo + n2, c_n - n2, False
            node_lo[sp + 2], node_n[sp + 2], node_done[sp + 2] = c_lo, n2, False
            sp += 3
    return float(values[0])


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _dual(lam: np.ndarray, capacity: np.ndarray, best: np.ndarray) -> float:
    """Σ_t λ_t·R_t + Σ_i max_t best[t, i], summed as the NumPy code does."""
    n_types, n_jobs = best.shape
    cost = np.empty(n_types)
    for t in range(n_types):
        cost[t] = lam[t] * capacity[t]
    fixed = _pairwise_sum(cost, 0, n_types)
    top = np.empty(n_jobs)
    for i in range(n_jobs):
        m = best[0, i]
        for t in range(1, n_types):
            if best[t, i] > m:
                m = best[t, i]
        top[i] = m
    return fixed + _pairwise_sum(top, 0, n_jobs)


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
    order = np.argsort(-theta[:n], kind="mergesort")
    acc = 0.0
    for j in range(n):
        acc += weight[order[j]]
        if acc > cap:
            return float(theta[order[j]])
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
