"""DRF's progressive filling as a scan over every job for every GPU: the reference the heap in
:func:`oak.policies.drf.drf_shares` is tested against (the same GPU counts and types on any input)."""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import Allocation, IntArray, RoundSnapshot
from oak.policies.rigid import fairness_order, rigid_config


def reference_drf_shares(
    capacity: IntArray,
    demand: IntArray,
    allowed: np.ndarray,
    order: IntArray,
    preferred: IntArray,
    held: IntArray | None = None,
) -> tuple[IntArray, IntArray]:
    """Progressive filling, one scan of the jobs per GPU handed out (see ``drf_shares``)."""
    n_jobs = len(demand)
    free = capacity.astype(np.int64).copy()
    count = np.zeros(n_jobs, dtype=np.int64)
    gtype = np.full(n_jobs, -1, dtype=np.int64)
    rank = np.empty(n_jobs, dtype=np.int64)
    rank[order] = np.arange(n_jobs)
    held_now = np.zeros(n_jobs, dtype=np.int64) if held is None else held
    while True:
        best, best_key = -1, (np.inf, 2, np.inf)
        for j in range(n_jobs):
            if count[j] >= demand[j]:
                continue
            t = gtype[j]
            if t < 0:
                cands = [u for u in range(len(capacity)) if allowed[j, u] and free[u] > 0]
                if not cands:
                    continue
                t = preferred[j] if preferred[j] in cands else max(cands, key=lambda u: (free[u], -u))
            elif free[t] <= 0:
                continue
            key = (count[j] / capacity[t], 0 if count[j] < held_now[j] else 1, rank[j])
            if key < best_key:
                best, best_key = j, key
                best_type = t
        if best < 0:
            return count, gtype
        gtype[best] = best_type
        count[best] += 1
        free[best_type] -= 1


def reference_drf_decide(snap: RoundSnapshot) -> Allocation:
    """``DrfPolicy.decide`` with the scan and a full pass over the jobs after every upgrade."""
    order = fairness_order(snap)
    n_types = len(snap.capacity)
    allowed = np.zeros((snap.num_jobs, n_types), dtype=bool)
    for t in range(n_types):
        allowed[:, t] = (snap.valid & (snap.config_type == t)[None, :]).any(axis=1)
    preferred = np.where(snap.current >= 0, snap.config_type[np.maximum(snap.current, 0)], -1)
    held_now = np.where(snap.current >= 0, snap.config_gpus[np.maximum(snap.current, 0)], 0)
    count, gtype = reference_drf_shares(snap.capacity, snap.max_gpus, allowed, order, preferred, held_now)
    choice = np.full(snap.num_jobs, -1, dtype=np.int64)
    free = snap.capacity.astype(np.int64).copy()
    for j in order:  # round down to a configuration
        if gtype[j] >= 0:
            c = rigid_config(snap, int(j), int(gtype[j]), int(count[j]))
            if c >= 0 and snap.config_gpus[c] <= free[gtype[j]]:
                choice[j] = c
                free[gtype[j]] -= snap.config_gpus[c]
    rank = np.empty(snap.num_jobs, dtype=np.int64)
    rank[order] = np.arange(snap.num_jobs)
    upgraded = True
    while upgraded:  # greedy upgrades, fewest GPUs first, while GPUs remain
        upgraded = False
        held = np.where(choice >= 0, snap.config_gpus[np.maximum(choice, 0)], 0)
        below_current = (held < held_now).astype(np.int64)
        for j in np.lexsort((rank, 1 - below_current, held)).tolist():
            for t in [int(gtype[j])] if gtype[j] >= 0 else range(n_types):
                cur = int(held[j]) if choice[j] >= 0 and snap.config_type[choice[j]] == t else 0
                ok = snap.valid[j] & (snap.config_type == t) & (snap.config_gpus > cur)
                ok &= snap.config_gpus - cur <= free[t]
                ok &= snap.config_gpus <= snap.max_gpus[j]
                if ok.any():
                    cand = np.flatnonzero(ok)
                    keep = int(snap.current[j])
                    c = keep if keep in cand else int(cand[np.argmin(snap.config_gpus[cand])])
                    free[t] -= snap.config_gpus[c] - cur
                    choice[j] = c
                    upgraded = True
                    break
            if upgraded:
                break
    return Allocation(config=choice, method="progressive-filling")
