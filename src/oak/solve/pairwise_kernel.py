"""NumPy's pairwise summation, compiled (numba), for kernels whose sums must equal NumPy's bit for bit.

``np.sum`` over a contiguous float64 axis adds blocks of at most 128 terms with eight accumulators (a plain loop
below eight terms, starting from −0.0) and adds halves cut at a multiple of 8 above; :func:`pairwise_sum` does the
same with the recursion on an explicit stack (numba's cache cannot hold self-recursive functions). One difference,
in the sign of zero only: a sum of zeros that are all −0.0 is −0.0 here and +0.0 from NumPy 2.4 (equal in every
comparison, so no decision can see it). Used by Hybrid
OAK's NSGA-II kernel and the round solver's price search (tests/test_warm_start.py checks it against ``np.sum``).
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np

#: numpy's pairwise summation block (``PW_BLOCKSIZE`` in numpy's loops_utils).
PW_BLOCK = 128


@numba.njit(cache=True)
def block_sum(a: Any, lo: int, n: int) -> Any:
    """numpy's ``pairwise_sum`` leaf (n ≤ 128): eight accumulators, then the tail in order."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
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
    return res


@numba.njit(cache=True)
def pairwise_sum(a: Any, lo: int, n: int) -> Any:
    """Σ a[lo:lo+n] in numpy's pairwise order (bit-identical to ``np.sum`` over a contiguous axis). Above 128
    terms numpy recurses on halves cut at a multiple of 8; here an explicit stack does (numba's cache
    cannot hold self-recursive functions)."""
    if n <= PW_BLOCK:
        return block_sum(a, lo, n)
    node_lo = np.empty(128, dtype=np.int64)
    node_n = np.empty(128, dtype=np.int64)
    node_open = np.zeros(128, dtype=np.bool_)
    vals = np.empty(128)
    node_lo[0], node_n[0], sp, vp = lo, n, 1, 0
    while sp > 0:
        top = sp - 1
        lo, m = node_lo[top], node_n[top]
        if m <= PW_BLOCK:
            vals[vp] = block_sum(a, lo, m)
            vp += 1
            sp -= 1
        elif node_open[top]:  # both halves summed: left below right on the value stack
            vals[vp - 2] = vals[vp - 2] + vals[vp - 1]
            vp -= 1
            node_open[top] = False
            sp -= 1
        else:
            node_open[top] = True
            m2 = m // 2
            m2 -= m2 % 8
            node_lo[sp], node_n[sp], node_open[sp] = lo + m2, m - m2, False  # right, summed second
            node_lo[sp + 1], node_n[sp + 1], node_open[sp + 1] = lo, m2, False  # left, summed first
            sp += 2
    return vals[0]
