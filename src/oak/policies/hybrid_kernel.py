"""Hybrid OAK's NSGA-II as one numba kernel (engine "numba"; imported only when that engine runs).

:func:`hybrid_nsga2` runs a whole round — repair of the initial population, then every generation's
tournaments, crossovers, mutations, repairs, duplicate elimination and survival — in nopython mode, with
the operators of :class:`oak.policies.hybrid.HybridProblem` and the loop of :func:`oak.policies.nsga.nsga2`
with ``eliminate_duplicates=True``. It draws from the round's ``numpy.random.Generator`` the same numbers
in the same order as the numpy engine, sums objectives as numpy does (pairwise) and detects duplicates by
the same 64-bit row hash, so both engines return the same population for the same generator (up to ties
between equal random doubles, which a 53-bit stream practically never produces). The kernel costs
≈ 0.1–0.5 ms per 20 × 20 round instead of the numpy engine's milliseconds of per-call overhead on (20, J)
arrays. Functions are compiled with ``cache=True``; none is self-recursive (numba cannot cache those).
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np

from oak.solve.pairwise_kernel import pairwise_sum


@numba.njit(cache=True)
def _objective_row(row: Any, value: Any, buf: Any) -> Any:
    na = value.shape[1] - 1
    for i in range(row.shape[0]):
        c = row[i]
        buf[i] = value[i, na if c < 0 else c]
    return pairwise_sum(buf, 0, row.shape[0])


@numba.njit(cache=True)
def objective(x: Any, value: Any) -> Any:
    """Σ_i value[i, x_i] (x_i = −1: the last column) per individual; ``HybridProblem.objective``."""
    out = np.empty(x.shape[0])
    buf = np.empty(x.shape[1])
    for p in range(x.shape[0]):
        out[p] = _objective_row(x[p], value, buf)
    return out


@numba.njit(cache=True)
def _repair_row(
    row: Any, order: Any, valid: Any, gpus: Any, config_type: Any, capacity: Any, best_fit: Any, used: Any
) -> None:
    n_cfg = valid.shape[1]
    for i in range(row.shape[0]):
        c = row[i]
        if c < 0 or c >= n_cfg or not valid[i, c]:
            row[i] = -1
    used[:] = 0
    for k in range(order.shape[0]):
        i = order[k]
        c = row[i]
        if c < 0:
            continue
        t = config_type[c]
        left = capacity[t] - used[t]
        if gpus[c] > left:
            c = best_fit[i, t, min(max(left, 0), best_fit.shape[2] - 1)]
            row[i] = c
        if c >= 0:
            used[config_type[c]] += gpus[c]


@numba.njit(cache=True)
def repair(x: Any, order: Any, valid: Any, gpus: Any, config_type: Any, capacity: Any, best_fit: Any) -> Any:
    """A repaired copy of x (P, J); ``HybridProblem.repair``."""
    out = x.copy()
    used = np.zeros(capacity.shape[0], dtype=np.int64)
    for p in range(out.shape[0]):
        _repair_row(out[p], order, valid, gpus, config_type, capacity, best_fit, used)
    return out


@numba.njit(cache=True)
def _row_key(row: Any, weights: Any) -> np.uint64:
    """``oak.policies.nsga._row_keys`` of one row: Σ uint64(x_j)·w_j modulo 2**64."""
    key = np.uint64(0)
    for j in range(row.shape[0]):
        key += np.uint64(row[j]) * weights[j]
    return key


@numba.njit(cache=True)
def _survive(
    x: Any, f: Any, m: int, n: int, weights: Any, rng: Any, keys: Any, dup: Any, idx: Any, out_x: Any, out_f: Any
) -> None:
    """``nsga._survive`` on the first m rows of x / f: the best n by (duplicate last, F, random) into
    out_x / out_f (one random double per row, drawn in row order)."""
    for p in range(m):
        keys[p] = _row_key(x[p], weights)
        d = False
        for q in range(p):
            if keys[q] == keys[p]:
                d = True
                break
        dup[p] = d
    tie = rng.random(m)
    for p in range(m):  # insertion sort of idx by (dup, f, tie); m ≤ 2·population
        cur = p
        k = p
        while k > 0:
            prev = idx[k - 1]
            if dup[prev] != dup[cur]:
                before = not dup[cur]
            elif f[prev] != f[cur]:
                before = f[cur] < f[prev]
            else:
                before = tie[cur] < tie[prev]
            if not before:
                break
            idx[k] = prev
            k -= 1
        idx[k] = cur
    for r in range(n):
        out_x[r] = x[idx[r]]
        out_f[r] = f[idx[r]]


@numba.njit(cache=True)
def hybrid_nsga2(
    initial: Any,
    order: Any,
    valid: Any,
    gpus: Any,
    config_type: Any,
    capacity: Any,
    value: Any,
    best_fit: Any,
    options: Any,
    n_options: Any,
    up: Any,
    down: Any,
    weights: Any,
    population: int,
    generations: int,
    tries: int,
    crossover_prob: float,
    p_step: float,
    rng: Any,
) -> tuple[Any, Any, int]:
    """One round of Hybrid OAK's NSGA-II (minimising F = −objective) from ``initial`` (P, J).

    Arrays as in ``HybridProblem``; weights: the row-hash weights (``nsga._hash_weights(J)``), uint64.
    Returns the final population (P, J) in survival order (best first), its F (P,) and the evaluations.
    """
    n_pop, j = initial.shape
    n_mate = (population + 1) // 2
    n_child = 2 * n_mate
    rate = max(1.0 / max(j, 1), 0.1)
    used = np.zeros(capacity.shape[0], dtype=np.int64)
    buf = np.empty(j)
    # pool: the population (rows < population) followed by up to `population` offspring
    pool = np.empty((2 * population, j), dtype=np.int64)
    pool_f = np.empty(2 * population)
    keys = np.empty(2 * population, dtype=np.uint64)
    dup = np.empty(2 * population, dtype=np.bool_)
    idx = np.empty(2 * population, dtype=np.int64)
    x = np.empty((population, j), dtype=np.int64)
    f = np.empty(population)

    start = initial.copy()
    start_f = np.empty(n_pop)
    for p in range(n_pop):
        _repair_row(start[p], order, valid, gpus, config_type, capacity, best_fit, used)
        start_f[p] = -_objective_row(start[p], value, buf)
    _survive(start, start_f, n_pop, population, weights, rng, keys, dup, idx, x, f)
    evaluations = n_pop

    need = 4 * n_mate
    perm_rows = (need + population - 1) // population
    perm = np.empty(perm_rows * population, dtype=np.int64)
    win = np.empty(n_child, dtype=np.int64)
    child = np.empty((n_child, j), dtype=np.int64)
    child_key = np.empty(n_child, dtype=np.uint64)
    block = n_child * j

    for _gen in range(generations - 1):
        seen = {_row_key(x[0], weights)}
        for p in range(1, population):
            seen.add(_row_key(x[p], weights))
        have = 0
        for _try in range(tries):
            # binary tournaments on random permutations (nsga._tournament)
            for r in range(perm_rows):
                perm[r * population : (r + 1) * population] = np.argsort(rng.random(population))
            coin = rng.random(n_child)
            for q in range(n_child):
                a = perm[2 * q]
                b = perm[2 * q + 1]
                if f[a] < f[b]:
                    win[q] = a
                elif f[b] < f[a]:
                    win[q] = b
                else:
                    win[q] = a if coin[q] < 0.5 else b
            # uniform crossover (HybridProblem.crossover), applied with probability crossover_prob
            swap = rng.random(n_mate * j)
            cross = rng.random(n_mate)
            for m in range(n_mate):
                pa = x[win[m]]
                pb = x[win[n_mate + m]]
                for i in range(j):
                    if cross[m] < crossover_prob and swap[m * j + i] < 0.5:
                        child[m, i] = pb[i]
                        child[n_mate + m, i] = pa[i]
                    else:
                        child[m, i] = pa[i]
                        child[n_mate + m, i] = pb[i]
            # mutation (HybridProblem.mutate): blocks of u: rate, step or redraw, up or down, redraw's pick
            u = rng.random(4 * block)
            for c in range(n_child):
                for i in range(j):
                    e = c * j + i
                    if u[e] < rate:
                        g = child[c, i]
                        if u[block + e] < p_step and g >= 0:
                            child[c, i] = up[i, g] if u[2 * block + e] < 0.5 else down[i, g]
                        else:
                            child[c, i] = options[i, np.int64(u[3 * block + e] * n_options[i])]
            # repair, then keep the offspring new to the population and to this generation's offspring
            kept = 0
            for c in range(n_child):
                _repair_row(child[c], order, valid, gpus, config_type, capacity, best_fit, used)
                child_key[c] = _row_key(child[c], weights)
                if child_key[c] not in seen:
                    seen.add(child_key[c])
                    kept += 1
                    if have < population:
                        pool[population + have] = child[c]
                        pool_f[population + have] = -_objective_row(child[c], value, buf)
                        have += 1
            if have >= population or kept == 0:
                break
        if have == 0:
            continue
        evaluations += have
        pool[:population] = x
        pool_f[:population] = f
        _survive(pool, pool_f, population + have, population, weights, rng, keys, dup, idx, x, f)
    return x, f, evaluations
