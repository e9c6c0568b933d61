"""The value grid of :func:`oak.solve.assignment.snap_values` as one compiled pass (numba).

Each finite valid value is divided by the grid step q (a power of two), rounded half to even (``np.rint``: LLVM's
``rint`` as NumPy's), pushed to at least one step away from zero on its side, and multiplied back; each job's
current configuration then gets the tie bonus. The same IEEE operations on the same operands as the NumPy code, so
the same grid bit for bit (tests/test_warm_start.py checks it, with and without the widest SIMD kernels). One pass
instead of a dozen NumPy passes over (J, C) arrays, for large rounds; imported only when a round is that large.
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def snap_grid(value: Any, valid: Any, prefer: Any, q: float, tie: float) -> Any:
    """(J, C) ``value`` on the grid of step ``q``; ``prefer`` (J,) each job's configuration that gets ``tie`` more
    (−1: none; an empty array: no bonus)."""
    n_jobs, n_cfg = value.shape
    out = np.empty((n_jobs, n_cfg))
    for i in range(n_jobs):
        for j in range(n_cfg):
            v = value[i, j]
            if valid[i, j] and np.isfinite(v):
                k = np.rint(v / q)
                if v > 0:
                    k = max(k, 1.0)
                elif v < 0:
                    k = min(k, -1.0)
                else:
                    k = 0.0
                out[i, j] = k * q
            else:
                out[i, j] = v
    for i in range(len(prefer)):
        j = prefer[i]
        if j >= 0 and valid[i, j] and np.isfinite(value[i, j]):
            out[i, j] += tie
    return out
