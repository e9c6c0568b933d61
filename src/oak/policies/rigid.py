"""Helpers shared by the rigid/fair baselines (Gavel, DRF): configuration lookups per job."""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import FloatArray, IntArray, RoundSnapshot


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


def rigid_configs(snap: RoundSnapshot) -> tuple[IntArray, FloatArray]:
    """Each job's rigid configuration per GPU type at its demand (J, K; −1: none) and its progress rate there
    (J, K; 0 where none): what the rigid policies (Gavel's two) choose among."""
    n_types = len(snap.capacity)
    cfg = np.full((snap.num_jobs, n_types), -1, dtype=np.int64)
    gpus = np.asarray(snap.config_gpus, dtype=np.int64)
    fits = snap.valid & (gpus[None, :] <= np.asarray(snap.requested_gpus, dtype=np.int64)[:, None])
    for t in range(n_types):  # ``rigid_config`` for every job at once: the first configuration with the most GPUs
        ok = fits & (snap.config_type == t)[None, :]
        best = np.argmax(np.where(ok, gpus[None, :], -1), axis=1)
        cfg[:, t] = np.where(ok.any(axis=1), best, -1)
    rate = np.where(cfg >= 0, np.take_along_axis(snap.progress_rate, np.maximum(cfg, 0), axis=1), 0.0)
    return cfg, rate


def fairness_order(snap: RoundSnapshot) -> IntArray:
    """Jobs by least attained GPU-service, then oldest, then index."""
    return np.lexsort((np.arange(snap.num_jobs), -snap.age_s, snap.attained_gpu_s)).astype(np.int64)
