"""Twins dealt their options one way (:func:`oak.solve.assignment.canonical_twins`) in one compiled pass (numba).

Jobs are twins when their rows are the same bits: valid in the same configurations with the same values there (an
invalid entry reads as NaN, as the NumPy code's ``where(valid, value, nan)``). A 64-bit hash of each row's bits
orders the rows (stable, so job order within a hash); each run of equal hashes is split into groups of identical
rows by comparing the bits, and each group's options go to its jobs in ascending index, the most valuable option
first (then the lower configuration index). A row whose NumPy fingerprint (its valid values summed in NumPy's
pairwise order, plus their count) is NaN has no twin there, as NaN equals nothing: so here too. The groups are the
NumPy code's, so the answer is the same (float64 values); imported for rounds beyond the DP and, with
``solve_assignment(first_come=True)``, for any round of more than ``SNAP_KERNEL_MIN`` entries.
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np

from oak.solve.pairwise_kernel import pairwise_sum

_NAN_BITS = np.array([np.nan]).view(np.uint64)[0]


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _row_bits(bits: Any, valid: Any, i: int, j: int) -> Any:
    return bits[i, j] if valid[i, j] else _NAN_BITS


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def twins_deal(value: Any, valid: Any, choice: Any) -> Any:
    """``choice`` (J,) with each group of twins' options dealt in the canonical order (see the module doc)."""
    n_jobs, n_cfg = value.shape
    out = choice.copy()
    if n_jobs < 2 or n_cfg == 0:
        return out
    bits = value.view(np.uint64)
    h = np.empty(n_jobs, dtype=np.uint64)
    alone = np.zeros(n_jobs, dtype=np.bool_)  # a NaN fingerprint: no twin (the NumPy code's equality fails)
    row = np.empty(n_cfg)
    for i in range(n_jobs):
        count = 0
        for j in range(n_cfg):
            row[j] = value[i, j] if valid[i, j] else 0.0
            count += 1 if valid[i, j] else 0
        alone[i] = np.isnan(pairwise_sum(row, 0, n_cfg) + count)
        x = np.uint64(14695981039346656037)
        for j in range(n_cfg):
            x = (x ^ _row_bits(bits, valid, i, j)) * np.uint64(1099511628211)
            x ^= x >> np.uint64(29)
        h[i] = x
    order = np.argsort(h, kind="mergesort")
    group = np.full(n_jobs, -1, dtype=np.int64)  # per position in ``order``: the group's first position
    members = np.empty(n_jobs, dtype=np.int64)
    chosen = np.empty(n_jobs, dtype=np.int64)
    worth = np.empty(n_jobs)
    lo = 0
    while lo < n_jobs:
        hi = lo + 1
        while hi < n_jobs and h[order[hi]] == h[order[lo]]:
            hi += 1
        for a in range(lo, hi):  # the run's groups of identical rows, each led by its first job
            if hi - lo < 2 or group[a] >= 0 or alone[order[a]]:
                continue
            group[a] = a
            m = 1
            members[0] = order[a]
            for b in range(a + 1, hi):
                if group[b] >= 0 or alone[order[b]]:
                    continue
                same = True
                for j in range(n_cfg):
                    if _row_bits(bits, valid, order[a], j) != _row_bits(bits, valid, order[b], j):
                        same = False
                        break
                if same:
                    group[b] = a
                    members[m] = order[b]
                    m += 1
            if m < 2:
                continue
            # members are in ascending job index (a stable sort by hash); deal the most valuable option first
            first = members[0]
            for k in range(m):
                c = out[members[k]]
                chosen[k] = c
                worth[k] = value[first, c] if c >= 0 else 0.0
            for k in range(1, m):  # insertion sort by (worth descending, configuration ascending)
                c, w = chosen[k], worth[k]
                p = k - 1
                while p >= 0 and (worth[p] < w or (worth[p] == w and chosen[p] > c)):
                    chosen[p + 1] = chosen[p]
                    worth[p + 1] = worth[p]
                    p -= 1
                chosen[p + 1] = c
                worth[p + 1] = w
            for k in range(m):
                out[members[k]] = chosen[k]
        lo = hi
    return out
