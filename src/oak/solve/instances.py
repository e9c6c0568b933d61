"""Seeded random rounds of the assignment problem at any cluster size, for benchmarks and tests.

The shape follows Sia's configuration set (reference §3.4) on a cluster of ``gpus`` GPUs split evenly over
``types`` GPU types: per type with R GPUs per node, the configurations 1, 2, 4, …, R GPUs on one node and k·R GPUs
on k nodes, capped at 64 GPUs (no job spans more). Values follow OAK's U − μ_na with U = K·goodput^½: concave
in GPUs (goodput ∝ GPUs^α, α ∈ [0.5, 1], per-type speed factors, 3 % noise), negative for the configurations
(or whole jobs) not worth more than leaving the job queued.
"""

from __future__ import annotations

import numpy as np

from oak.solve.assignment import AssignmentProblem

#: OAK's value of leaving a job unallocated (utility units), subtracted from every configuration's utility.
MU_NA = 1.1

#: Largest configuration (GPUs) of a generated job.
MAX_CONFIG_GPUS = 64


def split_capacity(gpus: int, types: int) -> list[int]:
    """``gpus`` GPUs split as evenly as possible over ``types`` types (the first types take the remainder)."""
    if gpus < types or types < 1:
        raise ValueError(f"gpus={gpus}, types={types}: expected at least one GPU per type")
    base, extra = divmod(gpus, types)
    return [base + (1 if t < extra else 0) for t in range(types)]


def config_gpus(capacity: int, per_node: int) -> list[int]:
    """Sia-style GPU counts of one type: 1, 2, 4, … < R, R, then k·R (k ≥ 2), all ≤ min(64, capacity)."""
    top = min(MAX_CONFIG_GPUS, capacity)
    r = min(per_node, top)
    out = []
    g = 1
    while g < r:
        out.append(g)
        g *= 2
    out.append(r)
    k = 2
    while k * r <= top:
        out.append(k * r)
        k += 1
    return out


def random_instance(
    rng: np.random.Generator, gpus: int, types: int, jobs: int, per_node: int | None = None
) -> AssignmentProblem:
    """A random round: ``jobs`` jobs on ``gpus`` GPUs of ``types`` types (``per_node`` GPUs per node; default 4
    when a type has at most 16 GPUs, as on the paper's cluster, else 8). Values are in utility units."""
    capacity = split_capacity(gpus, types)
    sizes: list[int] = []
    kinds: list[int] = []
    for t, cap in enumerate(capacity):
        r = per_node if per_node is not None else (4 if cap <= 16 else 8)
        counts = config_gpus(cap, r)
        sizes += counts
        kinds += [t] * len(counts)
    w = np.array(sizes, dtype=np.int64)
    gpu_type = np.array(kinds, dtype=np.int64)
    # OAK's value U − μ_na with U = K·(goodput)^½ (paper §III-B): goodput g·s_t·w^α (α: the job's scaling,
    # s_t: its speed on type t) with 3 % noise per configuration, K: an age factor in [1, e].
    base = rng.uniform(0.5, 2.0, size=(jobs, 1))
    alpha = rng.uniform(0.5, 1.0, size=(jobs, 1))
    speed = rng.uniform(0.6, 1.4, size=(jobs, types))[:, gpu_type]
    noise = 1.0 + rng.normal(0.0, 0.03, size=(jobs, len(w)))
    goodput = base * speed * np.power(w[None, :].astype(np.float64), alpha) * noise
    age = np.exp(rng.uniform(0.0, 1.0, size=(jobs, 1)))
    value = age * np.sqrt(np.maximum(goodput, 0.0)) - MU_NA
    valid = rng.random((jobs, len(w))) < 0.9
    return AssignmentProblem(value, valid, w, gpu_type, np.array(capacity, dtype=np.int64))
