"""The hulls of :func:`oak.solve.lagrangian.build_hulls` in one compiled pass (numba).

A row is one job's points on one GPU type. Point by point across all rows, the running maximum says which points
rise above all to their left, and each rising point pops from its row's stack the points that are not strictly
above the chord from the point beneath them to it, then is pushed; the hull points are then gathered per type. The
same comparisons, in the same floating-point expressions, as the vectorised NumPy loop, so both give the same hulls
bit for bit (tests/test_warm_start.py checks it). The NumPy loop pays its per-step overhead once per GPU count;
this kernel pays nothing per step, which is what large rounds (hundreds of jobs on thousands of GPUs, every round
of a simulation) need. Imported only when a round is that large, so ``import oak`` does not load numba.
"""

from __future__ import annotations

import numba  # type: ignore[import-untyped]
import numpy as np


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def hull_arrays(
    v_all: np.ndarray, pw: np.ndarray, pc_rows: np.ndarray, row_type: np.ndarray, n_types: int, n_jobs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All of :func:`oak.solve.lagrangian.build_hulls` after the points are grouped, in one pass: which points
    rise above all to their left (NumPy's running maximum, NaN included), the monotone chain, and
    the hulls per type — values, GPUs, configurations (``pc_rows`` (K, R): each point's), steps and slopes, each
    row padded with its last point — as ``build_hulls`` gathers them: the same values bit for bit."""
    k_max, n_rows = v_all.shape
    # point by point across all rows (rows are independent; each row sees its points in order): the running
    # maximum says which points rise, and each rising point pops from its row's stack the points that are not
    # strictly above the chord from the point beneath them to it, then is pushed
    stack = np.zeros((k_max, n_rows), dtype=np.int64)
    top = np.zeros(n_rows, dtype=np.int64)
    high = v_all[0].copy()
    for k in range(1, k_max):
        for r in range(n_rows):
            x = v_all[k, r]
            m = high[r]
            rising = x > m
            if m == m and (x != x or x > m):  # np.maximum: a NaN on either side wins
                high[r] = x
            if not rising:
                continue
            t = row_type[r]
            wk = pw[k, t]
            n = top[r]
            while n >= 1:
                a = stack[n, r]
                b = stack[n - 1, r]
                v1 = v_all[a, r]
                w1 = pw[a, t]
                v0 = v_all[b, r]
                w0 = pw[b, t]
                if (v1 - v0) * (wk - w1) <= (x - v1) * (w1 - w0):
                    n -= 1
                else:
                    break
            n += 1
            stack[n, r] = k
            top[r] = n
    h = 1
    for r in range(n_rows):
        if top[r] + 1 > h:
            h = top[r] + 1
    hv = np.empty((n_types, h, n_jobs))
    hw = np.empty((n_types, h, n_jobs))
    hc = np.empty((n_types, h, n_jobs), dtype=np.int64)
    for t in range(n_types):
        for p in range(h):
            for i in range(n_jobs):
                r = t * n_jobs + i
                q = stack[p, r] if p <= top[r] else stack[top[r], r]
                hv[t, p, i] = v_all[q, r]
                hw[t, p, i] = pw[q, t]
                hc[t, p, i] = pc_rows[q, r]
    dw = np.empty((n_types, h - 1, n_jobs))
    slope = np.empty((n_types, h - 1, n_jobs))
    for t in range(n_types):
        for p in range(h - 1):
            for i in range(n_jobs):
                d = hw[t, p + 1, i] - hw[t, p, i]
                dw[t, p, i] = d
                slope[t, p, i] = (hv[t, p + 1, i] - hv[t, p, i]) / d if d > 0 else -np.inf
    return hv, hw, hc, dw, slope


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def group_points(
    value: np.ndarray,
    valid: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    pos: np.ndarray,
    g_type: np.ndarray,
    k_max: int,
    n_types: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The values (K, T, J) and configurations (K, T, J) of :func:`oak.solve.lagrangian._grouped_points` where
    several configurations share a (type, GPU count): per group (its configurations ``order[starts[g]:
    starts[g+1]]``) and job, the most valuable (invalid: −inf; NaN wins, as ``np.maximum``) and the lowest
    configuration index of that value (none equal: the largest int64, as the NumPy code). Where +0.0 and −0.0 tie
    for the maximum the first is kept, which ``np.maximum`` need not do: values equal in every comparison, and the
    configuration picked the same."""
    n_jobs = value.shape[0]
    n_cfg = len(order)
    n_groups = len(starts)
    pv = np.full((k_max, n_types, n_jobs), -np.inf)
    pc = np.full((k_max, n_types, n_jobs), -1, dtype=np.int64)
    for j in range(n_jobs):
        for t in range(n_types):
            pv[0, t, j] = 0.0
    big = np.iinfo(np.int64).max
    for g in range(n_groups):
        lo = starts[g]
        hi = starts[g + 1] if g + 1 < n_groups else n_cfg
        k, t = pos[g], g_type[g]
        for j in range(n_jobs):
            best = -np.inf
            for q in range(lo, hi):
                c = order[q]
                v = value[j, c] if valid[j, c] else -np.inf
                if q == lo or np.isnan(v) or v > best:
                    best = v
            pick = big
            for q in range(lo, hi):
                c = order[q]
                v = value[j, c] if valid[j, c] else -np.inf
                if v == best and c < pick:
                    pick = c
            pv[k, t, j] = best
            pc[k, t, j] = pick
    return pv, pc
