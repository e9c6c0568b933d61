"""The merge-tree DP of :func:`oak.solve.dp.solve_dp_tree` as one compiled pass (numba).

The same programme on the same operands: each job's profile f[s] is its best gain among the configurations that
fit the state s (the first configuration of largest gain; −1 when no gain is positive), profiles are merged
pairwise level by level, h[s] = max over a ≤ s of f[a] + g[s − a] (the smallest a among equal sums), and the
splits are followed back from the full state. Each sum is one IEEE addition of the same two numbers as in the
NumPy code, and the comparisons pick the same first maximum, so the choice is the same bit for bit
(tests/test_scale_solver.py checks it on random problems, with and without the widest SIMD kernels). What it saves is the
NumPy calls: a paper-scale round's tree is a few thousand additions, which NumPy spends tens of calls on.

Gains and their sums must be finite: the NumPy code's NaN rules (a non-fitting configuration of infinite gain,
or ∞ − ∞ where sums overflow) are not reproduced, and :func:`tree_choice` returns ``None`` for the caller to run
the NumPy code instead.
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _tree(value: Any, valid: Any, gpus: Any, gpu_type: Any, usage: Any, rest: Any) -> Any:
    """Choice per job (−1 = none), or an empty array when a gain is not finite."""
    n_jobs, n_cfg = value.shape
    n_states = usage.shape[0]
    width = 1
    while width < n_jobs:
        width *= 2
    gain = np.zeros((n_jobs, n_cfg))
    most = 0.0  # Σ of each job's largest gain: no profile or sum of two exceeds it
    for j in range(n_jobs):
        top = 0.0
        for c in range(n_cfg):
            v = value[j, c]
            if valid[j, c] and v > 0.0:
                if not np.isfinite(v):
                    return np.empty(0, dtype=np.int64)
                gain[j, c] = v
                top = max(top, v)
        most += top
    if not np.isfinite(most):  # sums could overflow, and NumPy's inf − inf = NaN would pick other maxima
        return np.empty(0, dtype=np.int64)
    f = np.zeros((n_states + 1, width))
    f[n_states, :] = -np.inf
    leaf = np.full((n_states, max(n_jobs, 1)), -1, dtype=np.int64)
    for j in range(n_jobs):
        for s in range(n_states):
            best = 0.0
            arg = 0
            for c in range(n_cfg):
                cand = gain[j, c] if gpus[c] <= usage[s, gpu_type[c]] else 0.0
                if cand > best:
                    best = cand
                    arg = c
            f[s, j] = best
            if best > 0.0:
                leaf[s, j] = arg
    n_levels = 0
    w = width
    while w > 1:
        w //= 2
        n_levels += 1
    splits = np.zeros((max(n_levels, 1), n_states, max(width // 2, 1)), dtype=np.int64)
    level = 0
    while width > 1:
        half = width // 2
        nxt = np.empty((n_states + 1, half))
        nxt[n_states, :] = -np.inf
        for n in range(half):
            left = 2 * n
            right = left + 1
            for s in range(n_states):
                best = f[0, left] + f[rest[0, s], right]
                arg = 0
                for a in range(1, n_states):
                    r = rest[a, s]
                    if r == n_states:
                        continue  # a is not ≤ s: the NumPy code adds −inf here, never a maximum
                    total = f[a, left] + f[r, right]
                    if total > best:
                        best = total
                        arg = a
                nxt[s, n] = best
                splits[level, s, n] = arg
        f = nxt
        width = half
        level += 1
    state = np.full(1, n_states - 1, dtype=np.int64)
    for lv in range(n_levels - 1, -1, -1):
        down = np.empty(2 * len(state), dtype=np.int64)
        for q in range(len(state)):
            a = splits[lv, state[q], q]
            down[2 * q] = a
            down[2 * q + 1] = state[q] - a
        state = down
    choice = np.empty(n_jobs, dtype=np.int64)
    for j in range(n_jobs):
        choice[j] = leaf[state[j], j]
    return choice


def tree_choice(
    value: Any, valid: Any, gpus: Any, gpu_type: Any, usage: Any, rest: Any
) -> np.ndarray[Any, np.dtype[np.int64]] | None:
    """The merge tree's choice per job, or None when a gain is not finite (the caller runs the NumPy code)."""
    out = _tree(
        np.ascontiguousarray(value, dtype=np.float64),
        np.ascontiguousarray(valid, dtype=np.bool_),
        np.ascontiguousarray(gpus, dtype=np.int64),
        np.ascontiguousarray(gpu_type, dtype=np.int64),
        usage,
        rest,
    )
    if value.shape[0] > 0 and len(out) == 0:
        return None
    return np.asarray(out, dtype=np.int64)
