"""The monotone chain of :func:`oak.solve.lagrangian.build_hulls` as one compiled loop (numba).

Row by row (a row: one job's points on one GPU type), each rising point pops from the row's stack the points that
are not strictly above the chord from the point beneath them to it, then is pushed: the same comparisons, in the
same floating-point expressions, as the vectorised NumPy loop, so both give the same stacks bit for bit
(tests/test_lagrangian.py checks it). The NumPy loop pays its per-step overhead once per GPU count; this kernel
pays nothing per step, which is what large rounds (hundreds of jobs on thousands of GPUs, every round of a
simulation) need. Imported only when a round is that large, so ``import oak`` does not load numba.
"""

from __future__ import annotations

import numba  # type: ignore[import-untyped]
import numpy as np


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def hull_stacks(
    v_all: np.ndarray, pw: np.ndarray, row_type: np.ndarray, rising: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(stack (K, R) point indices, top (R,) index of each row's last hull point) for values ``v_all`` (K, R),
    GPUs ``pw`` (K, T) per point and type, each row's type and which points rise above all to their left."""
    k_max, n_rows = v_all.shape
    stack = np.zeros((k_max, n_rows), dtype=np.int64)
    top = np.zeros(n_rows, dtype=np.int64)
    for r in range(n_rows):
        t = row_type[r]
        n = 0
        for k in range(1, k_max):
            if not rising[k, r]:
                continue
            vk = v_all[k, r]
            wk = pw[k, t]
            while n >= 1:
                a = stack[n, r]
                b = stack[n - 1, r]
                v1 = v_all[a, r]
                w1 = pw[a, t]
                v0 = v_all[b, r]
                w0 = pw[b, t]
                if (v1 - v0) * (wk - w1) <= (vk - v1) * (w1 - w0):
                    n -= 1
                else:
                    break
            n += 1
            stack[n, r] = k
        top[r] = n
    return stack, top
