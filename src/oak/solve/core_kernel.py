"""The core DP's programme over the undecided jobs (:func:`oak.solve.core._core_dp`) as one compiled loop (numba).

Each step extends every partial allocation (a state: GPUs used per type, its loss Σ δ) by each option of the next
job, drops the extensions over a capacity or over the budget (loss plus the cost of the GPUs the remaining jobs
cannot fill), and keeps one state per usage vector: the least loss, ties to the earlier candidate (state-major,
then option), states ordered by usage key — what the NumPy loop's ``lexsort`` keeps (here one stable sort by key
and a scan of each key's candidates). The sums are the NumPy loop's
too: a loss plus an option's loss, then the idle cost Σ_t max(room_t − use_t, 0)·λ_t added left to right, as NumPy
reduces fewer than eight terms (so the kernel is used only with fewer than eight GPU types). The same states, the
same answer, bit for bit (tests/test_warm_start.py); without the NumPy loop's per-step overhead, which large rounds
pay in every round of a simulation. :func:`core_options` is the NumPy loop's set-up in one pass over the
(job, configuration) table: the jobs fixed at once, the options of the others grouped by job, the GPUs the later
jobs can still take. Imported only for such rounds, so ``import oak`` does not load numba.
"""

from __future__ import annotations

import numba  # type: ignore[import-untyped]
import numpy as np

from oak.solve.core import EMPTY, FOUND, TOO_BIG
from oak.solve.pairwise_kernel import pairwise_sum

__all__ = ["EMPTY", "FOUND", "TOO_BIG", "core_options", "core_programme"]


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def core_programme(
    edge: np.ndarray,
    use_all: np.ndarray,
    loss_all: np.ndarray,
    room: np.ndarray,
    capacity: np.ndarray,
    prices: np.ndarray,
    limit: float,
    stride: np.ndarray,
    max_states: int,
    usage0: np.ndarray,
    loss0: np.ndarray,
) -> tuple[int, np.ndarray]:
    """(status, the option index each undecided job takes) for options grouped by job (``edge``), their GPU use
    per type (``use_all``) and loss (``loss_all``); ``limit`` = budget + tolerance. Status FOUND, TOO_BIG (a step
    would exceed ``max_states``) or EMPTY (no allocation within the budget)."""
    n_multi = len(edge) - 1
    n_types = len(capacity)
    usage = usage0.copy()
    loss = loss0.copy()
    buf_parent = np.empty(1024, dtype=np.int64)
    buf_option = np.empty(1024, dtype=np.int64)
    offsets = np.zeros(n_multi + 1, dtype=np.int64)
    size = 0
    for k in range(n_multi):
        lo = edge[k]
        hi = edge[k + 1]
        n = len(loss)
        m = hi - lo
        if n * m > 4 * max_states:
            return TOO_BIG, np.empty(0, dtype=np.int64)
        c_use = np.empty((n * m, n_types), dtype=np.int64)
        c_loss = np.empty(n * m)
        c_key = np.empty(n * m, dtype=np.int64)
        c_parent = np.empty(n * m, dtype=np.int64)
        c_option = np.empty(n * m, dtype=np.int64)
        cnt = 0
        for s in range(n):
            for o in range(m):
                fits = True
                idle = 0.0
                key = 0
                for t in range(n_types):
                    u = usage[s, t] + use_all[lo + o, t]
                    if u > capacity[t]:
                        fits = False
                    c_use[cnt, t] = u
                    r = room[k, t] - u
                    if r < 0:
                        r = 0
                    idle += float(r) * prices[t]
                    key += u * stride[t]
                total = loss[s] + loss_all[lo + o]
                if fits and total + idle <= limit:
                    c_loss[cnt] = total
                    c_key[cnt] = key
                    c_parent[cnt] = s
                    c_option[cnt] = lo + o
                    cnt += 1
        if cnt == 0:
            return EMPTY, np.empty(0, dtype=np.int64)
        # One state per usage key, in key order: the least loss of the key's candidates, the first among equals
        # (a stable sort by key keeps candidates in order within a key) — the NumPy loop's lexsort picks the same.
        order = np.argsort(c_key[:cnt], kind="mergesort")
        pick = np.empty(cnt, dtype=np.int64)
        kept = 0
        j = 0
        while j < cnt:
            chosen = order[j]
            key = c_key[chosen]
            j += 1
            while j < cnt and c_key[order[j]] == key:
                if c_loss[order[j]] < c_loss[chosen]:
                    chosen = order[j]
                j += 1
            pick[kept] = chosen
            kept += 1
        if kept > max_states:
            return TOO_BIG, np.empty(0, dtype=np.int64)
        new_usage = np.empty((kept, n_types), dtype=np.int64)
        new_loss = np.empty(kept)
        if size + kept > len(buf_parent):
            grow = max(2 * len(buf_parent), size + kept)
            bp = np.empty(grow, dtype=np.int64)
            bo = np.empty(grow, dtype=np.int64)
            bp[:size] = buf_parent[:size]
            bo[:size] = buf_option[:size]
            buf_parent = bp
            buf_option = bo
        for q in range(kept):
            c = pick[q]
            new_usage[q] = c_use[c]
            new_loss[q] = c_loss[c]
            buf_parent[size + q] = c_parent[c]
            buf_option[size + q] = c_option[c]
        offsets[k] = size
        size += kept
        offsets[k + 1] = size
        usage = new_usage
        loss = new_loss
    best = -1
    best_cost = np.inf
    for s in range(len(loss)):
        idle = 0.0
        for t in range(n_types):
            idle += float(capacity[t] - usage[s, t]) * prices[t]
        cost = loss[s] + idle
        if best < 0 or cost < best_cost:
            best = s
            best_cost = cost
    if best_cost > limit:
        return EMPTY, np.empty(0, dtype=np.int64)
    picked = np.empty(n_multi, dtype=np.int64)
    state = best
    for k in range(n_multi - 1, -1, -1):
        picked[k] = buf_option[offsets[k] + state]
        state = buf_parent[offsets[k] + state]
    return FOUND, picked


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def core_options(
    delta: np.ndarray,
    best: np.ndarray,
    fits: np.ndarray,
    limit: float,
    gpus: np.ndarray,
    gtype: np.ndarray,
    capacity: np.ndarray,
    max_jobs: int,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
           np.ndarray]:  # fmt: skip
    """:func:`oak.solve.core.core_options_numpy` compiled, for ``limit`` = budget + tolerance: (status, choice with the
    jobs of one option fixed, their GPU use (1, T) and loss (1,), the undecided jobs, ``edge``, ``use_all``,
    ``loss_all``, ``room``, each option's configuration (−1: none)). Options per job: none first (when within
    the limit), then configurations in index order; a job's single option is its first; the fixed jobs' loss is
    summed in job order as NumPy sums. Status FOUND (arrays valid), EMPTY or TOO_BIG (more than ``max_jobs``
    undecided jobs). Float64 tables, as ``solve_core`` builds them."""
    n_jobs, n_cfg = delta.shape
    n_types = len(capacity)
    empty_i = np.empty(0, dtype=np.int64)
    empty_f = np.empty(0)
    n_opts = np.zeros(n_jobs, dtype=np.int64)
    first = np.full(n_jobs, -1, dtype=np.int64)
    n_single = 0
    n_multi = 0
    n_options = 0
    for j in range(n_jobs):
        cnt = 1 if best[j] <= limit else 0
        f = -1
        for c in range(n_cfg):
            if fits[j, c] and delta[j, c] <= limit:
                cnt += 1
                if f < 0:
                    f = c
        if cnt == 0:
            return (EMPTY, empty_i, np.empty((0, 0), dtype=np.int64), empty_f, empty_i, empty_i,
                    np.empty((0, 0), dtype=np.int64), empty_f, np.empty((0, 0), dtype=np.int64), empty_i)  # fmt: skip
        n_opts[j] = cnt
        first[j] = f
        if cnt == 1:
            n_single += 1
        else:
            n_multi += 1
            n_options += cnt
    choice = np.full(n_jobs, -1, dtype=np.int64)
    usage0 = np.zeros((1, n_types), dtype=np.int64)
    single_loss = np.empty(n_single)
    q = 0
    for j in range(n_jobs):
        if n_opts[j] == 1:
            c = first[j]
            choice[j] = c
            if c >= 0:
                usage0[0, gtype[c]] += gpus[c]
                single_loss[q] = delta[j, c]
            else:
                single_loss[q] = best[j]
            q += 1
    loss0 = np.zeros(1)
    if n_single > 0:
        loss0[0] = pairwise_sum(single_loss, 0, n_single)
    over = loss0[0] > limit
    for t in range(n_types):
        if usage0[0, t] > capacity[t]:
            over = True
    if over:
        return (EMPTY, empty_i, np.empty((0, 0), dtype=np.int64), empty_f, empty_i, empty_i,
                np.empty((0, 0), dtype=np.int64), empty_f, np.empty((0, 0), dtype=np.int64), empty_i)  # fmt: skip
    if n_multi > max_jobs:
        return (TOO_BIG, empty_i, np.empty((0, 0), dtype=np.int64), empty_f, empty_i, empty_i,
                np.empty((0, 0), dtype=np.int64), empty_f, np.empty((0, 0), dtype=np.int64), empty_i)  # fmt: skip
    multi = np.empty(n_multi, dtype=np.int64)
    edge = np.zeros(n_multi + 1, dtype=np.int64)
    use_all = np.zeros((n_options, n_types), dtype=np.int64)
    loss_all = np.empty(n_options)
    cfg_all = np.empty(n_options, dtype=np.int64)
    most = np.zeros((n_multi, n_types), dtype=np.int64)
    k = 0
    o = 0
    for j in range(n_jobs):
        if n_opts[j] < 2:
            continue
        multi[k] = j
        edge[k] = o
        if best[j] <= limit:
            cfg_all[o] = -1
            loss_all[o] = best[j]
            o += 1
        for c in range(n_cfg):
            if fits[j, c] and delta[j, c] <= limit:
                cfg_all[o] = c
                loss_all[o] = delta[j, c]
                use_all[o, gtype[c]] = gpus[c]
                if gpus[c] > most[k, gtype[c]]:
                    most[k, gtype[c]] = gpus[c]
                o += 1
        k += 1
    edge[n_multi] = o
    room = np.empty((n_multi, n_types), dtype=np.int64)
    for t in range(n_types):
        later = 0
        for k in range(n_multi - 1, -1, -1):
            room[k, t] = capacity[t] - later
            later += most[k, t]
    return FOUND, choice, usage0, loss0, multi, edge, use_all, loss_all, room, cfg_all
