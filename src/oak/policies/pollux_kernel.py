"""Pollux's NSGA-II round as one compiled loop (numba), the ``engine="numba"`` of :class:`PolluxPolicy`.

The operators are those of :class:`oak.policies.pollux.PolluxProblem` and the loop is that of
:func:`oak.policies.nsga.nsga2` without duplicate elimination: binary tournaments on random permutations
(lower F wins, ties at random), single-cut crossover with probability 0.9, mutation of every offspring,
repair, elitist (μ + λ) survival by (duplicate last, F, random). What differs is only how random numbers
are drawn, not their law:

* draws are lazy (a tie coin only on a tie, a grow step only when a grow happens);
* the per-job Bernoulli(0.1) reset and zero-row events are placed by geometric gaps (one draw per event
  instead of one per job), which gives the same independent Bernoulli(0.1) events;
* permutations are Fisher–Yates shuffles.

Repair draws exactly as the NumPy code does (K uniforms per over-limit row, rows in population order), so
for the same generator state the two repairs are bit-identical; the objective differs from NumPy's only in
summation order (≤ 1e-15 relative). All randomness comes from the ``numpy.random.Generator`` passed in
(numba draws from it the same stream NumPy would), so a seed gives bit-identical rounds.

A round at Pollux's published budget (100 × 100) costs ~1–10 ms here instead of 80–95 ms with the NumPy
engine, whose time is almost all per-call overhead on arrays of a few thousand entries.
"""

from __future__ import annotations

import math
from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np

from oak.model.snapshot import FloatArray, IntArray
from oak.policies.nsga import CROSSOVER_PROB, _hash_weights
from oak.policies.pollux import MAX_NODES_PER_JOB, P_RESET, P_ZERO_ENTRY, P_ZERO_JOB, SPEEDUP_FLOOR


@numba.njit(cache=True, inline="always")  # type: ignore[untyped-decorator]
def _row_shape(x: Any, i: int, j: int, current: Any, compare: bool) -> tuple[int, int, int, bool]:
    """Job j's row in individual i: the nodes it uses, its replicas, its first node (−1: none) and, when
    ``compare``, whether the row differs from ``current[j]`` — one pass over the nodes."""
    n = 0
    r = 0
    first = -1
    changed = False
    for k in range(x.shape[2]):
        v = x[i, j, k]
        if v > 0:
            n += 1
            r += v
            if first < 0:
                first = k
        if compare and v != current[j, k]:
            changed = True
    return n, r, first, changed


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def repair(
    x: Any,
    node_gpus: Any,
    node_type: Any,
    min_gpus: Any,
    max_replicas: Any,
    type_rank: Any,
    speedup: Any,
    rng: Any,
) -> None:
    """Reference §4.4, in place on the population x (P, J, K); the steps of ``PolluxProblem.repair``."""
    pop, n_jobs, n_nodes = x.shape
    n_types = type_rank.shape[1]
    n_speed_types, n_dim, r_dim = speedup.shape[1], speedup.shape[2], speedup.shape[3]
    dist = np.zeros(n_jobs, dtype=np.bool_)
    u = np.empty(n_nodes)
    perm = np.empty(n_nodes, dtype=np.int64)
    per_type = np.zeros(n_types, dtype=np.int64)
    for i in range(pop):
        n_dist = 0
        for j in range(n_jobs):  # (1) clip to [0, GPUs of the node], counting the nodes a job uses
            nz = 0
            for k in range(n_nodes):
                v = x[i, j, k]
                if v < 0:
                    x[i, j, k] = 0
                elif v > node_gpus[k]:
                    x[i, j, k] = node_gpus[k]
                if x[i, j, k] > 0:
                    nz += 1
            dist[j] = nz > 1
            n_dist += nz > 1
        # (2) one distributed job per node: from the second distributed job on, later jobs lose the node
        # (nothing to do with fewer than two distributed jobs)
        if n_dist > 1:
            for k in range(n_nodes):
                c = 0
                for j in range(n_jobs):
                    if x[i, j, k] > 0 and dist[j]:
                        c += 1
                    if c > 1:
                        x[i, j, k] = 0
        # (3) max replicas and (4) at most 16 nodes, nodes visited in a random order
        for j in range(n_jobs):
            s = 0
            nz = 0
            for k in range(n_nodes):
                s += x[i, j, k]
                if x[i, j, k] > 0:
                    nz += 1
            if s > max_replicas[j] or nz > MAX_NODES_PER_JOB:
                for k in range(n_nodes):  # perm = argsort(u), by insertion (K is small)
                    u[k] = rng.random()
                    q = k
                    while q > 0 and u[perm[q - 1]] > u[k]:
                        perm[q] = perm[q - 1]
                        q -= 1
                    perm[q] = k
                cum = 0
                prev = 0
                used = 0
                limit = max_replicas[j]
                for q in range(n_nodes):
                    k = perm[q]
                    cum += x[i, j, k]
                    m = min(cum, limit)
                    v = m - prev
                    prev = m
                    if v > 0:
                        used += 1
                        if used > MAX_NODES_PER_JOB:
                            v = 0
                    x[i, j, k] = v
        # (5) node capacity, jobs in order
        for k in range(n_nodes):
            cum = 0
            prev = 0
            for j in range(n_jobs):
                cum += x[i, j, k]
                m = min(cum, node_gpus[k])
                x[i, j, k] = m - prev
                prev = m
        # (6) one GPU type per job: the type holding most of its GPUs (ties: better-ranked type); a job on
        # one type keeps it (its count outscores any rank, ranks being 0 … types − 1), so only mixed rows change
        if n_types > 1:
            for j in range(n_jobs):
                per_type[:] = 0
                for k in range(n_nodes):
                    per_type[node_type[k]] += x[i, j, k]
                used = 0
                for t in range(n_types):
                    if per_type[t] > 0:
                        used += 1
                if used < 2:
                    continue
                keep = 0
                best = per_type[0] * n_types + type_rank[j, 0]
                for t in range(1, n_types):
                    score = per_type[t] * n_types + type_rank[j, t]
                    if score > best:
                        best = score
                        keep = t
                for k in range(n_nodes):
                    if node_type[k] != keep:
                        x[i, j, k] = 0
        # (7) min GPUs and positive goodput (every entry is >= 0 here, so the GPUs are the replicas counted)
        for j in range(n_jobs):
            n, r, first, _ = _row_shape(x, i, j, x, False)
            drop = r < min_gpus[j] or n >= n_dim or r >= r_dim
            if not drop:
                t = 0
                if n_speed_types > 1:
                    t = node_type[first] if first >= 0 else node_type[0]
                drop = speedup[j, t, n, r] <= 0.0
            if drop:
                for k in range(n_nodes):
                    x[i, j, k] = 0


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def evaluate(x: Any, current: Any, node_type: Any, speedup: Any, restart_factor: Any, p: float) -> Any:
    """F1 = −PM_p(ŝ) per individual of x (P, J, K), as ``PolluxProblem.evaluate``.

    The speedup lookup (speedup[j, type of first used node, #nodes, #replicas]) shares one pass over the nodes
    with the changed-row test (:func:`_row_shape`): a separate lookup made a Pollux round ~1.5× slower (measured
    on recorded rounds)."""
    pop, n_jobs = x.shape[0], x.shape[1]
    n_types, n_dim, r_dim = speedup.shape[1], speedup.shape[2], speedup.shape[3]
    f = np.empty(pop)
    for i in range(pop):
        acc = 0.0
        for j in range(n_jobs):
            n, r, first, changed = _row_shape(x, i, j, current, True)
            s = 0.0
            if n < n_dim and r < r_dim:
                t = 0
                if n_types > 1:
                    t = node_type[first] if first >= 0 else node_type[0]
                s = speedup[j, t, n, r]
            if changed:
                s *= restart_factor[j]
            if p == -1.0:
                acc += 1.0 / (s + SPEEDUP_FLOOR)
            elif p == 0.0:
                acc += math.log(max(s, SPEEDUP_FLOOR))
            else:
                acc += (s + SPEEDUP_FLOOR) ** p
        if p == -1.0:  # NumPy's power takes the reciprocal for the exponent −1: the same bits
            f[i] = -(1.0 / (acc / n_jobs))
        elif p == 0.0:
            f[i] = -math.exp(acc / n_jobs)
        else:
            f[i] = -((acc / n_jobs) ** (1.0 / p))
    return f


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _next_hit(pos: int, log_q: float, rng: Any) -> int:
    """Index of the next success after ``pos`` in a run of Bernoulli(1 − q) trials (geometric gap)."""
    return pos + 1 + math.floor(math.log(1.0 - rng.random()) / log_q)


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def mutate(x: Any, current: Any, node_gpus: Any, rng: Any) -> None:
    """Reference §4.5 in place on x (M, J, K): reset rows (p 0.1), zero entries (p 0.1 × 0.1), grow."""
    m_count, n_jobs, n_nodes = x.shape
    log_reset = math.log(1.0 - P_RESET)
    log_zero = math.log(1.0 - P_ZERO_JOB)
    next_reset = _next_hit(-1, log_reset, rng)
    next_zero = _next_hit(-1, log_zero, rng)
    free = np.empty(n_nodes, dtype=np.int64)
    for i in range(m_count):
        for j in range(n_jobs):
            flat = i * n_jobs + j
            if flat == next_reset:
                for k in range(n_nodes):
                    x[i, j, k] = current[j, k]
                next_reset = _next_hit(next_reset, log_reset, rng)
            if flat == next_zero:
                for k in range(n_nodes):
                    if rng.random() < P_ZERO_ENTRY:
                        x[i, j, k] = 0
                next_zero = _next_hit(next_zero, log_zero, rng)
        n_room = 0
        for k in range(n_nodes):
            used = 0
            for j in range(n_jobs):
                used += x[i, j, k]
            free[k] = max(node_gpus[k] - used, 0)
            if free[k] > 0:
                n_room += 1
        if n_room == 0:
            continue
        p1 = 1.0 / n_room
        for j in range(n_jobs):
            n_runs = 0
            for k in range(n_nodes):
                if free[k] > 0 and x[i, j, k] > 0:
                    n_runs += 1
            for k in range(n_nodes):
                if free[k] == 0:
                    continue
                p2 = 1.0 / n_runs if x[i, j, k] > 0 else 0.0
                if rng.random() < p1 + p2 - p1 * p2:
                    x[i, j, k] += int(rng.random() * (free[k] + 1))


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _shuffle(a: Any, rng: Any) -> None:
    for q in range(len(a) - 1, 0, -1):
        r = int(rng.random() * (q + 1))
        a[q], a[r] = a[r], a[q]


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _duplicates(flat: Any, weights: Any) -> Any:
    """1 where a row of flat (N, W) equals an earlier row, else 0: rows hashed (the weights of
    ``nsga._hash_weights``) into an open-addressing table of first occurrences, equal hashes compared in full."""
    total, width = flat.shape
    size = 4
    while size < 2 * total:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, dtype=np.int64)
    keys = np.empty(total, dtype=np.uint64)
    dup = np.zeros(total, dtype=np.int64)
    for i in range(total):
        h = np.uint64(0)
        for q in range(width):
            h += np.uint64(flat[i, q]) * weights[q]
        keys[i] = h
        slot = np.int64((h ^ (h >> np.uint64(31))) & mask)
        while True:
            b = table[slot]
            if b < 0:
                table[slot] = i
                break
            if keys[b] == h:
                same = True
                for q in range(width):
                    if flat[i, q] != flat[b, q]:
                        same = False
                        break
                if same:
                    dup[i] = 1
                    break
            slot = (slot + 1) & (size - 1)
    return dup


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _survive(x: Any, f: Any, n: int, weights: Any, rng: Any) -> Any:
    """Indices of the n survivors: unique individuals before duplicates, then lower F, then at random."""
    total = x.shape[0]
    dup = _duplicates(x.reshape(total, -1), weights)
    perm = np.arange(total)  # a random order breaks the remaining ties
    _shuffle(perm, rng)
    unique = perm[dup[perm] == 0]
    best = unique[np.argsort(f[unique], kind="mergesort")]
    if len(best) >= n:
        return best[:n]
    dups = perm[dup[perm] == 1]
    return np.concatenate((best, dups[np.argsort(f[dups], kind="mergesort")]))[:n]


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def run(
    initial: Any,
    current: Any,
    node_gpus: Any,
    node_type: Any,
    min_gpus: Any,
    max_replicas: Any,
    type_rank: Any,
    speedup: Any,
    restart_factor: Any,
    p: float,
    generations: int,
    weights: Any,
    rng: Any,
) -> tuple[Any, Any, int]:
    """NSGA-II from ``initial`` (P, J, K): final population best first, its objective, evaluations made."""
    population = initial.shape[0]
    x = initial.copy()
    repair(x, node_gpus, node_type, min_gpus, max_replicas, type_rank, speedup, rng)
    f = evaluate(x, current, node_type, speedup, restart_factor, p)
    keep = _survive(x, f, population, weights, rng)
    x = x[keep]
    f = f[keep]
    evaluations = population
    n_mate = (population + 1) // 2
    n_jobs = x.shape[1]
    perms = np.arange(population)
    n_perm = (4 * n_mate + population - 1) // population
    picks = np.empty(n_perm * population, dtype=np.int64)
    union = np.empty((2 * population, x.shape[1], x.shape[2]), dtype=np.int64)
    f_union = np.empty(2 * population)
    n_nodes = x.shape[2]
    winners = np.empty(2 * n_mate, dtype=np.int64)
    off = np.empty((population, n_jobs, n_nodes), dtype=np.int64)
    for _ in range(generations - 1):
        for q in range(n_perm):
            _shuffle(perms, rng)
            picks[q * population : (q + 1) * population] = perms
        for w in range(2 * n_mate):
            a = picks[2 * w]
            b = picks[2 * w + 1]
            if f[a] < f[b]:
                winners[w] = a
            elif f[b] < f[a]:
                winners[w] = b
            else:
                winners[w] = a if rng.random() < 0.5 else b
        for m in range(n_mate):
            a = winners[m]
            b = winners[n_mate + m]
            cut = int(rng.random() * max(n_jobs, 1))
            if rng.random() >= CROSSOVER_PROB:
                cut = 0
            second = n_mate + m < population  # the last mating's second child is dropped when P is odd
            for j in range(n_jobs):
                first, other = (b, a) if j < cut else (a, b)
                for k in range(n_nodes):
                    off[m, j, k] = x[first, j, k]
                    if second:
                        off[n_mate + m, j, k] = x[other, j, k]
        mutate(off, current, node_gpus, rng)
        repair(off, node_gpus, node_type, min_gpus, max_replicas, type_rank, speedup, rng)
        f_off = evaluate(off, current, node_type, speedup, restart_factor, p)
        evaluations += population
        union[:population] = x
        union[population:] = off
        f_union[:population] = f
        f_union[population:] = f_off
        keep = _survive(union, f_union, population, weights, rng)
        x = union[keep]
        f = f_union[keep]
    return x, f, evaluations


def run_round(
    initial: IntArray,
    problem: Any,
    generations: int,
    rng: np.random.Generator,
) -> tuple[IntArray, FloatArray, int]:
    """Run the compiled loop on a :class:`~oak.policies.pollux.PolluxProblem` (arrays made contiguous)."""
    initial = np.ascontiguousarray(initial, dtype=np.int64)
    k = initial.shape[1] * initial.shape[2]
    x, f, evaluations = run(
        initial,
        np.ascontiguousarray(problem.current, dtype=np.int64),
        np.ascontiguousarray(problem.node_gpus, dtype=np.int64),
        np.ascontiguousarray(problem.node_type, dtype=np.int64),
        np.ascontiguousarray(problem.min_gpus, dtype=np.int64),
        np.ascontiguousarray(problem.max_replicas, dtype=np.int64),
        np.ascontiguousarray(problem.type_rank, dtype=np.int64),
        np.ascontiguousarray(problem.speedup, dtype=np.float64),
        np.ascontiguousarray(problem.restart_factor, dtype=np.float64),
        float(problem.p),
        int(generations),
        _hash_weights(k),
        rng,
    )
    return x, f, int(evaluations)
