"""Exact optimum from a Lagrangian certificate: enumerate only the partial allocations the bound cannot rule out.

For prices λ ≥ 0 let r_i = max(0, max_j (v_ij − λ_t(j)·w_j)) be job i's best reduced value and δ_i(o) = r_i −
reduced value of option o ≥ 0 (o = none: δ = r_i). For any feasible allocation x,

    value(x) = L(λ) − Σ_i δ_i(x_i) − Σ_t λ_t·(R_t − used_t(x))  ≤  L(λ) − Σ_i δ_i(x_i),

so an allocation better than an incumbent of value LB has Σ_i δ_i(x_i) + λ·idle GPUs ≤ L(λ) − LB (the
"budget"). Options with δ above the budget are ruled out; jobs left with one option are fixed at once; a dynamic
programme over the others keeps, per vector of GPUs used, the partial allocation of least Σ δ, and drops every
one whose Σ δ plus the cost of the GPUs the remaining jobs cannot fill anyway exceeds the budget. With a good
incumbent and tight prices only a handful of jobs have several options, and the state set stays small. The
result is exactly optimal: the incumbent is within budget, so the programme never returns less. Costs: O(J·C)
to filter, then O(states × options) per undecided job.
"""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import BoolArray, FloatArray, IntArray
from oak.solve.assignment import AssignmentProblem, dot, use_kernel

#: Give up (return None) when a step would hold more partial allocations than this.
MAX_CORE_STATES = 20_000

#: Fractions of the budget tried in turn (iterative deepening, see ``solve_core``), when more than ``DEEPEN_ABOVE``
#: jobs have several options within the full budget.
DEEPENING = (1 / 16, 1 / 4, 1.0)
DEEPEN_ABOVE = 12

#: ``_core_dp`` runs compiled (``oak.solve.core_kernel``) above this many option entries (options × GPU types);
#: below, the NumPy loop costs less than loading numba.
KERNEL_MIN_OPTIONS = 300

#: ``_core_dp``'s set-up runs compiled (``core_kernel.core_options``) above this many (job, configuration) entries,
#: or once the kernel is loaded.
KERNEL_MIN_TABLE = 20_000

#: Give up (return None) when more jobs than this have several options within the budget.
MAX_CORE_JOBS = 400


def solve_core(
    problem: AssignmentProblem,
    prices: FloatArray,
    bound: float,
    incumbent: IntArray,
    max_states: int = MAX_CORE_STATES,
    max_jobs: int = MAX_CORE_JOBS,
    engine: str = "auto",
) -> IntArray | None:
    """An optimal choice per job (−1: none), given prices λ ≥ 0 (value per GPU), ``bound`` = L(λ) (value units) and
    a feasible ``incumbent``; None when more than ``max_jobs`` jobs have several options within the budget or the
    programme would exceed ``max_states`` states (no forced jobs: apply them beforehand).

    Iterative deepening: the programme first runs on a fraction of the budget. Any allocation it finds is optimal
    (one better would cost less, so would be within that fraction too); when it finds none, the budget grows. A
    weak incumbent then costs little: the optimum's own cost, L(λ) − optimum, sets the work."""
    n_types = len(problem.capacity)
    gpus = problem.gpus.astype(np.int64)
    gtype = problem.gpu_type.astype(np.int64)
    capacity = problem.capacity.astype(np.int64)
    red = np.where(problem.valid, problem.value - prices[gtype][None, :] * gpus[None, :], -np.inf)
    best = np.maximum(red.max(axis=1, initial=-np.inf), 0.0)
    rows = np.flatnonzero(incumbent >= 0)
    lb = float(problem.value[rows, incumbent[rows]].sum())
    full = bound - lb
    tol = 1e-9 * max(1.0, abs(bound))
    if full <= tol:
        return incumbent.copy()
    # Keys of GPU-usage vectors: mixed radix over (R_t + 1); give up if it would overflow.
    radix = capacity + 1
    if float(np.prod(radix.astype(np.float64))) >= 2.0**62:
        return None
    stride = np.ones(n_types, dtype=np.int64)
    for t in range(n_types - 2, -1, -1):
        stride[t] = stride[t + 1] * radix[t + 1]
    delta = best[:, None] - red  # (J, C), inf where invalid
    fits = problem.valid & (gpus[None, :] <= capacity[gtype][None, :])
    # Deepen only when the full budget leaves many jobs open; with few, one run costs less than the retries.
    open_jobs = int(np.count_nonzero((fits & (delta <= full + tol)).sum(axis=1) + (best <= full + tol) > 1))
    for fraction in DEEPENING if open_jobs > DEEPEN_ABOVE else (1.0,):
        found = _core_dp(problem, prices, delta, best, fits, full * fraction, tol, stride, max_states, max_jobs, engine)
        if found is None:
            return None
        if not isinstance(found, str):
            return found
    return incumbent.copy()  # cannot happen: the incumbent is within the full budget


#: Status codes of the set-up (:func:`core_options_numpy`, ``core_kernel.core_options``) and the programme.
FOUND, TOO_BIG, EMPTY = 0, 1, 2

#: What the set-up returns: status, choice (jobs of one option fixed), their GPU use (1, T) and loss (1,), the
#: undecided jobs, ``edge``, ``use_all``, ``loss_all``, ``room``, each option's configuration (−1: none).
CoreOptions = tuple[int, IntArray, IntArray, FloatArray, IntArray, IntArray, IntArray, FloatArray, IntArray, IntArray]


def core_options_numpy(
    delta: FloatArray,
    best: FloatArray,
    fits: BoolArray,
    limit: float,
    gpus: IntArray,
    gtype: IntArray,
    capacity: IntArray,
    max_jobs: int,
) -> CoreOptions:
    """The programme's set-up for ``limit`` = budget + tolerance: jobs with a single option within it are fixed at
    once; the others' options (none first, then configurations in index order) are grouped by job, with the GPUs
    the later jobs can still take. Status EMPTY (nothing within the limit), TOO_BIG (more than ``max_jobs``
    undecided jobs) or FOUND. ``oak.solve.core_kernel.core_options`` is this, compiled, bit for bit."""
    n_jobs = len(best)
    n_types = len(capacity)
    no_i, no_f, no_2 = np.empty(0, np.int64), np.empty(0), np.empty((0, 0), np.int64)
    ok = fits & (delta <= limit)
    none_ok = best <= limit
    n_opts = ok.sum(axis=1) + none_ok
    if np.any(n_opts == 0):  # cannot happen: a job's best option has δ = 0
        return EMPTY, no_i, no_2, no_f, no_i, no_i, no_2, no_f, no_2, no_i
    choice = np.full(n_jobs, -1, dtype=np.int64)
    single = np.flatnonzero(n_opts == 1)
    single_cfg = np.where(ok[single].any(axis=1), ok[single].argmax(axis=1), -1)
    choice[single] = single_cfg
    taken = single_cfg >= 0
    usage = np.zeros((1, n_types), dtype=np.int64)
    np.add.at(usage[0], gtype[single_cfg[taken]], gpus[single_cfg[taken]])
    loss = np.array([float(np.where(taken, delta[single, np.maximum(single_cfg, 0)], best[single]).sum())])
    if loss[0] > limit or np.any(usage[0] > capacity):
        return EMPTY, no_i, no_2, no_f, no_i, no_i, no_2, no_f, no_2, no_i
    multi = np.flatnonzero(n_opts > 1)
    if len(multi) > max_jobs:
        return TOO_BIG, no_i, no_2, no_f, no_i, no_i, no_2, no_f, no_2, no_i
    # Options of the jobs left, grouped by job (none first): configuration (−1: none), loss δ, GPU-usage vector.
    n_multi = len(multi)
    r_idx, c_idx = np.nonzero(ok[multi])
    none_rows = np.flatnonzero(none_ok[multi])
    rows_all = np.concatenate([none_rows, r_idx])
    order = np.argsort(rows_all, kind="stable")
    rows_all = rows_all[order]
    cfg_all = np.concatenate([np.full(len(none_rows), -1, dtype=np.int64), c_idx])[order]
    has = cfg_all >= 0
    safe = np.maximum(cfg_all, 0)
    loss_all = np.where(has, delta[multi[rows_all], safe], best[multi[rows_all]]).astype(np.float64)
    use_all = np.zeros((len(cfg_all), n_types), dtype=np.int64)
    use_all[np.flatnonzero(has), gtype[cfg_all[has]]] = gpus[cfg_all[has]]
    edge = np.searchsorted(rows_all, np.arange(n_multi + 1)).astype(np.int64)
    # future[k]: the most GPUs per type the jobs after the k-th can still take; the GPUs they cannot fill are left
    # idle whatever happens, at a certain cost λ·idle that counts against the budget too. room = R − future.
    future = np.zeros((n_multi, n_types), dtype=np.int64)
    if n_multi > 1:
        most = np.maximum.reduceat(use_all, edge[:-1], axis=0)
        future[:-1] = np.cumsum(most[::-1], axis=0)[::-1][1:]
    room = capacity[None, :] - future
    return FOUND, choice, usage, loss, multi, edge, use_all, loss_all, room, cfg_all


def _core_dp(
    problem: AssignmentProblem,
    prices: FloatArray,
    delta: FloatArray,
    best: FloatArray,
    fits: BoolArray,
    budget: float,
    tol: float,
    stride: IntArray,
    max_states: int,
    max_jobs: int,
    engine: str = "auto",
) -> IntArray | str | None:
    """The best allocation of cost (Σ δ + λ·idle) ≤ ``budget``; "empty" when there is none, None when too big.
    ``engine``: ``numpy`` (the vectorised loop below), ``numba`` (the same set-up and programme compiled,
    :mod:`oak.solve.core_kernel`: the same answer bit for bit, fewer than eight GPU types) or ``auto``: numba with
    fewer than eight types, for more than ``KERNEL_MIN_OPTIONS`` option entries (options × types) or
    ``KERNEL_MIN_TABLE`` (job, configuration) entries, or once the kernel is loaded."""
    n_types = len(problem.capacity)
    gpus = problem.gpus.astype(np.int64)
    gtype = problem.gpu_type.astype(np.int64)
    capacity = problem.capacity.astype(np.int64)
    limit = float(budget + tol)
    compiled = engine == "numba" or (n_types < 8 and use_kernel(engine, delta.size > KERNEL_MIN_TABLE, "core_kernel"))
    if compiled:
        from oak.solve.core_kernel import core_options

        setup: CoreOptions = core_options(delta, best, fits, limit, gpus, gtype, capacity, int(max_jobs))
    else:
        setup = core_options_numpy(delta, best, fits, limit, gpus, gtype, capacity, int(max_jobs))
    status, choice, usage, loss, multi, edge, use_all, loss_all, room, cfg_all = setup
    if status == EMPTY:
        return "empty"
    if status == TOO_BIG:
        return None
    n_multi = len(multi)
    if n_multi == 0:
        idle_cost = float(dot(capacity - usage[0], prices))
        return choice if loss[0] + idle_cost <= limit else "empty"
    big = compiled or len(cfg_all) * n_types > KERNEL_MIN_OPTIONS
    if engine == "numba" or (n_types < 8 and use_kernel(engine, big, "core_kernel")):
        from oak.solve.core_kernel import core_programme

        status, picked = core_programme(
            edge, use_all, loss_all, room, capacity, np.asarray(prices, dtype=np.float64), limit, stride,
            int(max_states), usage, loss,
        )  # fmt: skip
        if status == TOO_BIG:
            return None
        if status != FOUND:
            return "empty"
        choice[multi] = cfg_all[picked]
        return choice
    trail: list[tuple[IntArray, IntArray]] = []  # per job in ``multi``: (parent state, configuration) of each state
    for k in range(n_multi):
        lo, hi = int(edge[k]), int(edge[k + 1])
        n, m = len(loss), hi - lo
        if n * m > 4 * max_states:
            return None
        cand_use = (usage[:, None, :] + use_all[None, lo:hi, :]).reshape(n * m, n_types)
        cand_loss = (loss[:, None] + loss_all[None, lo:hi]).ravel()
        idle = dot(np.maximum(room[k][None, :] - cand_use, 0), prices)
        cand = np.flatnonzero((cand_loss + idle <= limit) & np.all(cand_use <= capacity[None, :], axis=1))
        if len(cand) == 0:
            return "empty"
        cand_use, cand_loss = cand_use[cand], cand_loss[cand]
        # One state per usage vector: the least loss (ties: the earlier parent, then the earlier option).
        key = cand_use @ stride
        order = np.lexsort((cand_loss, key))
        first = np.ones(len(order), dtype=bool)
        first[1:] = key[order[1:]] != key[order[:-1]]
        pick = order[first]
        if len(pick) > max_states:
            return None
        usage, loss = cand_use[pick], cand_loss[pick]
        parent, which = np.divmod(cand[pick], m)
        trail.append((parent, cfg_all[lo + which]))
    # value = L − Σδ − λ·idle: the best final state has the least cost Σδ + λ·(R − used). Only when that cost is
    # within the budget is the state's allocation proved the best of all (see solve_core).
    cost = loss + dot(capacity[None, :] - usage, prices)
    state = int(np.argmin(cost))
    if cost[state] > limit:
        return "empty"
    for k in range(n_multi - 1, -1, -1):
        parent, cfg = trail[k]
        choice[multi[k]] = cfg[state]
        state = int(parent[state])
    return choice
