"""Gavel's round-based priorities as first written, a loop over every (job, type) pair and a sort of tuples: the
reference :func:`oak.policies.gavel.round_priorities` is tested against."""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import FloatArray, IntArray, RoundSnapshot
from oak.policies.gavel import NEW_JOB_PRIORITY


def reference_round_priorities(
    snap: RoundSnapshot, cfg: IntArray, x: FloatArray, gpus: IntArray
) -> tuple[IntArray, FloatArray]:
    held_gpus = np.maximum(gpus, 1)
    received = snap.attained_gpu_s / held_gpus / np.maximum(snap.age_s, 1e-9)
    never_ran = snap.attained_gpu_s <= 0
    pairs = []
    values = np.full(snap.goodput.shape, -np.inf)
    for j in range(snap.num_jobs):
        for t in range(len(snap.capacity)):
            if cfg[j, t] < 0:
                continue
            xs = float(x[j, t])
            prio = xs * NEW_JOB_PRIORITY if never_ran[j] else xs / max(float(received[j]), 1e-9)
            deficit = xs * float(snap.age_s[j]) - float(snap.attained_gpu_s[j] / held_gpus[j])
            values[j, cfg[j, t]] = prio
            pairs.append((-prio, -deficit, -xs, j, t))
    pairs.sort()
    free = snap.capacity.astype(np.int64).copy()
    choice = np.full(snap.num_jobs, -1, dtype=np.int64)
    for *_, j, t in pairs:
        c = cfg[j, t]
        if choice[j] < 0 and snap.config_gpus[c] <= free[t]:
            choice[j] = c
            free[t] -= snap.config_gpus[c]
    return choice, values
