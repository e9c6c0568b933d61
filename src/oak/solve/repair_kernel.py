"""The repair of :func:`oak.solve.lagrangian.repair` as one compiled loop (numba).

Per GPU type over capacity: each job's hull level, the hull increments it holds (their slopes and GPUs; a job off
its hull gives back all its GPUs at once, at its average value per GPU, in an extra row), one stable sort of the
slopes in the NumPy code's row-major layout, the running sum of GPUs in that order (a sequential sum, as
``np.cumsum``), and the first increments that cover the excess given back. The same operations on the same
operands as the NumPy code, so the same allocation bit for bit (tests/test_warm_start.py); without its two dozen
array passes per type, which large rounds pay in every round the price search leaves over capacity.
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def repair_kernel(
    value: Any, gpus: Any, gtype: Any, capacity: Any, h_config: Any, h_dw: Any, h_slope: Any, choice: Any
) -> Any:
    """``choice`` brought within every type's capacity (see :func:`oak.solve.lagrangian.repair`); hulls as
    ``Hulls``: ``h_config`` (T, H, J), ``h_dw``/``h_slope`` (T, H−1, J)."""
    out = choice.copy()
    n_jobs = len(choice)
    n_types = len(capacity)
    h = h_config.shape[1]
    n_inc = h - 1
    used = np.zeros(n_types, dtype=np.int64)
    for i in range(n_jobs):
        if choice[i] >= 0:
            used[gtype[choice[i]]] += gpus[choice[i]]
    for t in range(n_types):
        if used[t] <= capacity[t]:
            continue
        n = 0
        for i in range(n_jobs):
            if choice[i] >= 0 and gtype[choice[i]] == t:
                n += 1
        rows = np.empty(n, dtype=np.int64)
        q = 0
        for i in range(n_jobs):
            if choice[i] >= 0 and gtype[choice[i]] == t:
                rows[q] = i
                q += 1
        level = np.full(n, -1, dtype=np.int64)
        any_off = False
        for r in range(n):
            for k in range(h):
                if h_config[t, k, rows[r]] == choice[rows[r]]:
                    level[r] = k
                    break
            if level[r] < 0:
                any_off = True
        n_rows = n_inc + 1 if any_off else n_inc
        slope = np.empty(n_rows * n)
        dw = np.empty(n_rows * n)
        for k in range(1, h):
            for r in range(n):
                j = rows[r]
                held = k <= level[r] and h_dw[t, k - 1, j] > 0
                slope[(k - 1) * n + r] = h_slope[t, k - 1, j] if held else np.inf
                dw[(k - 1) * n + r] = h_dw[t, k - 1, j] if held else 0.0
        if any_off:
            for r in range(n):
                j = rows[r]
                if level[r] < 0:
                    slope[n_inc * n + r] = value[j, choice[j]] / gpus[choice[j]]
                    dw[n_inc * n + r] = float(gpus[choice[j]])
                else:
                    slope[n_inc * n + r] = np.inf
                    dw[n_inc * n + r] = 0.0
        order = np.argsort(slope, kind="mergesort")
        running = np.cumsum(dw[order])
        excess = float(used[t] - capacity[t])
        m = min(int(np.searchsorted(running, excess, side="left")) + 1, len(order))
        given = np.zeros(n, dtype=np.int64)  # increments given back per job
        drop = np.zeros(n, dtype=np.bool_)
        for p in range(m):
            k, r = divmod(order[p], n)
            if k < n_inc:
                given[r] += 1
            else:
                drop[r] = True
        for r in range(n):
            j = rows[r]
            kept = level[r] - given[r] if level[r] >= 0 else -1
            if drop[r] or kept < 0:
                out[j] = -1
            else:
                out[j] = h_config[t, min(kept, h - 1), j]
    return out
