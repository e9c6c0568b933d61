"""The local search of :func:`oak.solve.lagrangian.improve` as one compiled loop (numba).

The same moves in the same order as the NumPy code: the core options in ``np.nonzero``'s order ("none" last), each
round's single moves batched as ``_batch_singles`` does (each job's best-scored option, the first on a tie; jobs
by score, stably; per type while their GPUs fit) or else the best pair as ``_best_pair`` finds it (the releaser
that frees at least the GPUs needed at the least loss, the lowest count on a tie; at most four requirers and four
releasers tried), the same floating-point expressions, and the slack summed in NumPy's pairwise order — so the
same allocation bit for bit (tests/test_warm_start.py checks it on random rounds, with and without the widest SIMD
kernels). NumPy's version pays its per-call overhead a few dozen times a round; this pays it once, which is what
large rounds (hundreds of jobs, every round of a simulation) need. Imported only when a round is that large.
"""

from __future__ import annotations

from typing import Any

import numba  # type: ignore[import-untyped]
import numpy as np

from oak.solve.pairwise_kernel import pairwise_sum


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def improve_kernel(
    value: Any,
    valid: Any,
    gpus: Any,
    gtype: Any,
    n_types: int,
    prices: Any,
    bound: float,
    choice: Any,
    free: Any,
    max_moves: int,
) -> Any:
    """``improve`` on value/valid (J, C), configurations' GPUs and types (C,), prices (T,), a feasible ``choice``
    (J,) (copied) and its free GPUs per type (T,); returns the improved choice."""
    n_jobs, n_cfg = value.shape
    choice = choice.copy()
    free = free.copy()
    red = np.empty((n_jobs, n_cfg))
    best = np.empty(n_jobs)
    for i in range(n_jobs):
        m = -np.inf
        for j in range(n_cfg):
            r = value[i, j] - prices[gtype[j]] * gpus[j] if valid[i, j] else -np.inf
            red[i, j] = r
            if r > m or r != r:
                m = r
        best[i] = m if m > 0.0 or m != m else 0.0
    cur_v = np.zeros(n_jobs)
    cur_w = np.zeros(n_jobs, dtype=np.int64)
    cur_t = np.full(n_jobs, -1, dtype=np.int64)
    for i in range(n_jobs):
        c = choice[i]
        if c >= 0:
            cur_v[i] = value[i, c]
            cur_w[i] = gpus[c]
            cur_t[i] = gtype[c]
    tol = 1e-9 * max(1.0, abs(bound))
    slack = bound - pairwise_sum(cur_v, 0, n_jobs)
    # core options (δ ≤ slack): np.nonzero's order, then "none" (configuration −1) for the jobs it fits
    limit = slack + tol
    count = 0
    for i in range(n_jobs):
        for j in range(n_cfg):
            if valid[i, j] and best[i] - red[i, j] <= limit:
                count += 1
    for i in range(n_jobs):
        if best[i] <= limit:
            count += 1
    ci = np.empty(count, dtype=np.int64)
    cj = np.empty(count, dtype=np.int64)
    k = 0
    for i in range(n_jobs):
        for j in range(n_cfg):
            if valid[i, j] and best[i] - red[i, j] <= limit:
                ci[k] = i
                cj[k] = j
                k += 1
    for i in range(n_jobs):
        if best[i] <= limit:
            ci[k] = i
            cj[k] = -1
            k += 1
    cdelta = np.empty(count)
    cv = np.empty(count)
    cw = np.empty(count, dtype=np.int64)
    ct = np.empty(count, dtype=np.int64)
    for k in range(count):
        i, j = ci[k], cj[k]
        if j >= 0:
            cdelta[k] = best[i] - red[i, j]
            cv[k] = value[i, j]
            cw[k] = gpus[j]
            ct[k] = gtype[j]
        else:
            cdelta[k] = best[i] - 0.0
            cv[k] = 0.0
            cw[k] = 0
            ct[k] = -1
    span = 0
    for j in range(n_cfg):
        if gpus[j] > span:
            span = gpus[j]
    n_live = count
    same = np.empty(count, dtype=np.bool_)
    take = np.empty(count, dtype=np.int64)
    gain = np.empty(count)
    single = np.empty(count, dtype=np.bool_)
    score = np.empty(count)
    moves_i = np.empty(n_jobs + 2, dtype=np.int64)
    moves_j = np.empty(n_jobs + 2, dtype=np.int64)
    for _ in range(max_moves):
        if slack <= tol or n_live == 0:
            break
        any_single = False
        for k in range(n_live):
            i = ci[k]
            s = ct[k] == cur_t[i] and ct[k] >= 0
            same[k] = s
            take[k] = (cw[k] - (cur_w[i] if s else 0)) if ct[k] >= 0 else 0
            gain[k] = cv[k] - cur_v[i]
            fits = ct[k] < 0 or take[k] <= free[max(ct[k], 0)]
            single[k] = gain[k] > tol and fits
            any_single = any_single or single[k]
        if any_single:
            for k in range(n_live):
                i = ci[k]
                released = prices[max(cur_t[i], 0)] * cur_w[i] if (cur_t[i] >= 0 and not same[k]) else 0.0
                score[k] = (gain[k] - (prices[max(ct[k], 0)] * take[k] if ct[k] >= 0 else 0.0)) + released
            n_moves = _batch_singles(ci, ct, take, score, single, n_live, free, n_types, n_jobs, moves_i, moves_j, cj)
        else:
            n_moves = _best_pair(
                ci, cj, ct, cw, cur_t, cur_w, take, gain, same, n_live, free, span, n_types, tol, moves_i, moves_j
            )
            if n_moves == 0:
                break
        for m in range(n_moves):
            i, j = moves_i[m], moves_j[m]
            if cur_t[i] >= 0:
                free[cur_t[i]] += cur_w[i]
            if j >= 0:
                free[gtype[j]] -= gpus[j]
            choice[i] = j
            cur_v[i] = value[i, j] if j >= 0 else 0.0
            cur_w[i] = gpus[j] if j >= 0 else 0
            cur_t[i] = gtype[j] if j >= 0 else -1
        for t in range(n_types):
            if free[t] < 0:  # cannot happen: every move is checked; kept as a guard for the invariant
                raise AssertionError("local search broke a capacity")
        slack = bound - pairwise_sum(cur_v, 0, n_jobs)
        kept = 0
        for k in range(n_live):
            if cdelta[k] <= slack + tol:
                ci[kept], cj[kept], cdelta[kept] = ci[k], cj[k], cdelta[k]
                cv[kept], cw[kept], ct[kept] = cv[k], cw[k], ct[k]
                kept += 1
        n_live = kept
    return choice


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _batch_singles(
    ci: Any,
    ct: Any,
    take: Any,
    score: Any,
    single: Any,
    n_live: int,
    free: Any,
    n_types: int,
    n_jobs: int,
    moves_i: Any,
    moves_j: Any,
    cj: Any,
) -> int:
    """``lagrangian._batch_singles``: the moves into ``moves_i``/``moves_j``; returns how many."""
    # each job's best-scored single move, the first (in option order) on a tie; jobs in ascending order
    pick = np.full(n_jobs, -1, dtype=np.int64)
    for k in range(n_live):
        if single[k]:
            i = ci[k]
            if pick[i] < 0 or -score[k] < -score[pick[i]]:
                pick[i] = k
    n = 0
    for i in range(n_jobs):
        if pick[i] >= 0:
            n += 1
    per_job = np.empty(n, dtype=np.int64)
    keys = np.empty(n)
    n = 0
    for i in range(n_jobs):
        if pick[i] >= 0:
            per_job[n] = pick[i]
            keys[n] = -score[pick[i]]
            n += 1
    per_job = per_job[np.argsort(keys, kind="mergesort")]
    ok = np.ones(n, dtype=np.bool_)
    for t in range(n_types):
        used = 0
        for p in range(n):
            m = per_job[p]
            if ct[m] == t:
                used += max(take[m], 0)
                ok[p] = used <= free[t]
    out = 0
    for p in range(n):
        if ok[p]:
            moves_i[out] = ci[per_job[p]]
            moves_j[out] = cj[per_job[p]]
            out += 1
    if out == 0 and n > 0:  # the best move alone always fits
        moves_i[0] = ci[per_job[0]]
        moves_j[0] = cj[per_job[0]]
        out = 1
    return out


@numba.njit(cache=True)  # type: ignore[untyped-decorator]
def _best_pair(
    ci: Any,
    cj: Any,
    ct: Any,
    cw: Any,
    cur_t: Any,
    cur_w: Any,
    take: Any,
    gain: Any,
    same: Any,
    n_live: int,
    free: Any,
    span: int,
    n_types: int,
    tol: float,
    moves_i: Any,
    moves_j: Any,
) -> int:
    """``lagrangian._best_pair``: the pair into ``moves_i``/``moves_j``; returns 2, or 0 when there is none."""
    best_net = tol
    found = 0
    fits_alone = np.empty(n_live, dtype=np.bool_)
    freed = np.empty(n_live, dtype=np.int64)
    for k in range(n_live):
        fits_alone[k] = ct[k] < 0 or take[k] <= free[max(ct[k], 0)]
        freed[k] = -take[k] if same[k] else cur_w[ci[k]]
    per = np.empty(span + 1)
    e_best = np.zeros(span + 1, dtype=np.int64)
    suffix = np.empty(span + 1)
    for t in range(n_types):
        n_rel = 0
        n_req = 0
        for k in range(n_live):
            if cur_t[ci[k]] == t and freed[k] > 0 and (ct[k] == t or fits_alone[k]):
                n_rel += 1
            if ct[k] == t:
                need = take[k] - free[t]
                if need > 0 and need <= span and gain[k] > tol:
                    n_req += 1
        if n_rel == 0 or n_req == 0:
            continue
        r_idx = np.empty(n_rel, dtype=np.int64)
        loss = np.empty(n_rel)
        amount = np.empty(n_rel, dtype=np.int64)
        q_idx = np.empty(n_req, dtype=np.int64)
        q_need = np.empty(n_req, dtype=np.int64)
        a_n = 0
        b_n = 0
        for k in range(n_live):
            if cur_t[ci[k]] == t and freed[k] > 0 and (ct[k] == t or fits_alone[k]):
                r_idx[a_n] = k
                loss[a_n] = -gain[k]
                amount[a_n] = min(freed[k], span)
                a_n += 1
            if ct[k] == t:
                need = take[k] - free[t]
                if need > 0 and need <= span and gain[k] > tol:
                    q_idx[b_n] = k
                    q_need[b_n] = need
                    b_n += 1
        per[:] = np.inf
        for a in range(n_rel):
            if loss[a] < per[amount[a]]:
                per[amount[a]] = loss[a]
        # the least loss over releasers freeing at least d GPUs, and the fewest GPUs achieving it (argmin's first)
        low = np.inf
        at = 0
        for d in range(span, -1, -1):
            if per[d] <= low:
                low = per[d]
                at = d
            suffix[d] = low
            e_best[d] = at if low < np.inf else 0
        net = np.empty(n_req)
        for b in range(n_req):
            net[b] = gain[q_idx[b]] - suffix[q_need[b]]
        for _ in range(4):
            k = int(np.argmax(net))
            if net[k] <= best_net:
                break
            b = q_idx[k]
            e = e_best[q_need[k]]
            ok = False
            tried = 0
            for p in range(n_rel):
                if tried == 4:
                    break
                a = r_idx[p]
                if amount[p] != e or loss[p] != per[e] or ci[a] == ci[b]:
                    continue
                tried += 1
                fits = True
                for t2 in range(n_types):
                    after = free[t2]
                    for m in (a, b):
                        if cur_t[ci[m]] == t2:
                            after += cur_w[ci[m]]
                        if ct[m] == t2:
                            after -= cw[m]
                    if after < 0:
                        fits = False
                if fits:
                    ok = True
                    best_net = net[k]
                    moves_i[0], moves_j[0] = ci[a], cj[a]
                    moves_i[1], moves_j[1] = ci[b], cj[b]
                    found = 2
                    break
            if ok:
                break
            net[k] = -np.inf
    return found
