"""Helpers shared by the rigid/fair baselines (Gavel, DRF): configuration lookups per job."""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import IntArray, RoundSnapshot


def rigid_config(snap: RoundSnapshot, job: int, gpu_type: int, gpus: int) -> int:
    """The valid configuration of ``gpu_type`` with the most GPUs not above ``gpus`` (−1 if none).

    Rigid jobs ask for a GPU count; Sia's configurations offer powers of two within a node and whole nodes
    beyond, so a demand that is not one of them is rounded down to the nearest configuration.
    """
    ok = snap.valid[job] & (snap.config_type == gpu_type) & (snap.config_gpus <= gpus)
    if not ok.any():
        return -1
    cand = np.flatnonzero(ok)
    return int(cand[np.argmax(snap.config_gpus[cand])])


def fairness_order(snap: RoundSnapshot) -> IntArray:
    """Jobs by least attained GPU-service, then oldest, then index."""
    return np.lexsort((np.arange(snap.num_jobs), -snap.age_s, snap.attained_gpu_s)).astype(np.int64)
