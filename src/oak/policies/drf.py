"""DRF (reference §8): max-min fair GPU counts, no throughput model.

Optimises the minimum dominant share: GPUs are handed out one at a time to the job with the smallest
dominant share (ties: least attained service, then oldest) up to each job's maximum, each GPU type being a
resource; shares are then rounded down to Sia's configurations and jobs upgraded greedily while GPUs remain.
Departs from DRF in the rounding (a job runs only on Sia's configurations, as every policy here does) and in
breaking ties in favour of a job's current allocation: with ties broken by attained service alone a GPU moves
back and forth every round and, since every move costs a restore, long-restore jobs never progress.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import Allocation, IntArray, RoundSnapshot
from oak.policies.base import PolicyBase
from oak.policies.rigid import fairness_order


def drf_shares(
    capacity: IntArray,
    demand: IntArray,
    allowed: np.ndarray,
    order: IntArray,
    preferred: IntArray,
    held: IntArray | None = None,
) -> tuple[IntArray, IntArray]:
    """Progressive filling: (GPUs per job, GPU type per job) before rounding to configurations.

    capacity: (T,) GPUs per type; demand: (J,) the most GPUs each job may take; allowed: (J, T) whether job j
    may run on type t; order: tie-break order of jobs; preferred: (J,) the type a job holds now (−1: none);
    held: (J,) GPUs a job holds now. A job's dominant share is its GPUs divided by its type's capacity; each
    step gives one GPU to the job with the smallest share that can still grow (leftover GPUs thus go to the
    fewest-GPU job first). Ties go first to a job still below what it holds now (stability), then by ``order``.
    A job without a type yet takes the type it holds now if that has a free GPU, else the one with the most
    free GPUs (the first among equals).

    The jobs wait in a heap keyed (share, not below what it holds, rank): O(G log J) for G GPUs handed out,
    where scanning every job for every GPU took seconds a round on 2,048 GPUs. Every key is unique (ranks
    are), so the heap's minimum is the scan's; a job that cannot grow now never can again (free GPUs only
    fall), so it leaves the heap when it comes up."""
    n_jobs = len(demand)
    n_types = len(capacity)
    cap = [int(c) for c in capacity.tolist()]
    free = list(cap)
    dem = [int(d) for d in np.asarray(demand).tolist()]
    may = np.asarray(allowed, dtype=bool).tolist()
    pref = [int(p) for p in np.asarray(preferred).tolist()]
    rank = [0] * n_jobs
    for r, j in enumerate(np.asarray(order).tolist()):
        rank[j] = r
    held_now = [0] * n_jobs if held is None else [int(h) for h in np.asarray(held).tolist()]
    count = [0] * n_jobs
    gtype = [-1] * n_jobs
    heap = [(0.0, 0 if held_now[j] > 0 else 1, rank[j], j) for j in range(n_jobs) if dem[j] > 0]
    heapq.heapify(heap)
    while heap:
        j = heapq.heappop(heap)[3]
        t = gtype[j]
        if t < 0:
            cands = [u for u in range(n_types) if may[j][u] and free[u] > 0]
            if not cands:
                continue
            t = pref[j] if pref[j] in cands else max(cands, key=lambda u: (free[u], -u))
            gtype[j] = t
        elif free[t] <= 0:
            continue
        count[j] += 1
        free[t] -= 1
        if count[j] < dem[j]:
            heapq.heappush(heap, (count[j] / cap[t], 0 if count[j] < held_now[j] else 1, rank[j], j))
    return np.array(count, dtype=np.int64), np.array(gtype, dtype=np.int64)


@dataclass(frozen=True)
class DrfPolicy(PolicyBase):
    """Dominant Resource Fairness on GPU counts, up to each job's max_gpus."""

    name: str = "drf"

    def decide(self, snap: RoundSnapshot) -> Allocation:
        order = fairness_order(snap)
        n_types = len(snap.capacity)
        gpus = np.asarray(snap.config_gpus, dtype=np.int64)
        of_type = [snap.config_type == t for t in range(n_types)]
        allowed = np.zeros((snap.num_jobs, n_types), dtype=bool)
        for t in range(n_types):
            allowed[:, t] = (snap.valid & of_type[t][None, :]).any(axis=1)
        preferred = np.where(snap.current >= 0, snap.config_type[np.maximum(snap.current, 0)], -1)
        held_now = np.where(snap.current >= 0, gpus[np.maximum(snap.current, 0)], 0)
        count, gtype = drf_shares(snap.capacity, snap.max_gpus, allowed, order, preferred, held_now)
        # round down to a configuration: each job's ``rigid_config`` at its share (the first with the most
        # GPUs of its type within the share), kept in fairness order while its type has the GPUs
        fits = snap.valid & (snap.config_type[None, :] == gtype[:, None]) & (gpus[None, :] <= count[:, None])
        down = np.where(fits.any(axis=1), np.argmax(np.where(fits, gpus[None, :], -1), axis=1), -1).tolist()
        choice = np.full(snap.num_jobs, -1, dtype=np.int64)
        free = snap.capacity.astype(np.int64).copy()
        for j in order.tolist():
            c = down[j]
            if c >= 0 and gpus[c] <= free[gtype[j]]:
                choice[j] = c
                free[gtype[j]] -= gpus[c]
        rank = np.empty(snap.num_jobs, dtype=np.int64)
        rank[order] = np.arange(snap.num_jobs)
        # Greedy upgrades, fewest GPUs first, while GPUs remain: each pass upgrades the first job in that
        # order that can grow. A job that cannot grow never can later (free GPUs only fall and its own
        # configuration is unchanged), so it is not tried again.
        stuck = np.zeros(snap.num_jobs, dtype=bool)
        upgraded = True
        while upgraded:
            upgraded = False
            held = np.where(choice >= 0, gpus[np.maximum(choice, 0)], 0)
            below_current = (held < held_now).astype(np.int64)
            for j in np.lexsort((rank, 1 - below_current, held)).tolist():
                if stuck[j]:
                    continue
                for t in [int(gtype[j])] if gtype[j] >= 0 else range(n_types):
                    cur = int(held[j]) if choice[j] >= 0 and snap.config_type[choice[j]] == t else 0
                    ok = snap.valid[j] & of_type[t] & (gpus > cur)
                    ok &= gpus - cur <= free[t]
                    ok &= gpus <= snap.max_gpus[j]
                    if ok.any():
                        cand = np.flatnonzero(ok)
                        keep = int(snap.current[j])
                        c = keep if keep in cand else int(cand[np.argmin(gpus[cand])])
                        free[t] -= gpus[c] - cur
                        choice[j] = c
                        upgraded = True
                        break
                if upgraded:
                    break
                stuck[j] = True
        return Allocation(config=choice, method="progressive-filling")
