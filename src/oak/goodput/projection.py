"""Sia's cross-GPU-type projection of goodput (reference §3.6, "project throughputs").

If a job has a fitted throughput model on GPU type B but none on type A, its goodput on a configuration of A
with K GPUs is estimated from B's model at the same number of replicas packed onto B's nodes, scaled by the
ratio of single-GPU throughputs:

    G_A(K) ≈ G_B(⌈K·unit_B / R_B⌉ nodes, K replicas) × x1_A / x1_B

unit_B: GPUs per data-parallel replica on B (the job's "scale unit"; 1 for every data-parallel application,
S pipeline stages for Sia's PMP jobs). R_B: GPUs per node of type B. x1_t: the job's 1-GPU throughput on type t
(samples/s). A's own node count does not enter: the replicas are assumed packed as tightly as B's nodes allow.

All functions are pure and vectorised over configurations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from oak.goodput.batch import BatchChoice
from oak.goodput.throughput import ThroughputParams, iteration_time

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Goodput on type B at (nodes, replicas) arrays of equal shape (samples/s, same shape).
GoodputFn = Callable[[IntArray, IntArray], FloatArray]


def single_gpu_throughput(params: ThroughputParams, b_max: float) -> float:
    """x1: throughput of one GPU at the largest allowed per-GPU batch ``b_max`` without accumulation,
    b_max / T_iter(N=1, R=1, b_max, s=0) (samples/s), from the fitted model."""
    t = float(iteration_time(params, 1, 1, float(b_max), 0)[()])
    if not (np.isfinite(t) and t > 0.0):
        raise ValueError(f"1-GPU step time {t!r} at b = {b_max}; expected a positive finite time")
    return float(b_max) / t


def projected_shapes(replicas: npt.ArrayLike, gpus_per_node_b: int, unit_b: int = 1) -> tuple[IntArray, IntArray]:
    """Where B's model is evaluated for K = ``replicas``: (⌈K·unit_B / R_B⌉ nodes, K replicas) on type B."""
    if gpus_per_node_b < 1 or unit_b < 1:
        raise ValueError(f"gpus_per_node_b = {gpus_per_node_b}, unit_b = {unit_b}; expected positive integers")
    k = np.asarray(replicas, dtype=np.int64)
    nodes = -((-k * unit_b) // gpus_per_node_b)  # integer ceil
    return np.asarray(np.maximum(nodes, 1), dtype=np.int64), k.copy()


def project_goodput(
    goodput_b: GoodputFn,
    nodes: npt.ArrayLike,
    replicas: npt.ArrayLike,
    x1_a: float,
    x1_b: float,
    gpus_per_node_b: int,
    unit_b: int = 1,
) -> FloatArray:
    """Projected goodput on type A for configurations (``nodes``, ``replicas``) of A (samples/s).

    ``goodput_b(nodes_b, replicas_b)`` is the job's goodput on type B; ``x1_a``, ``x1_b`` its 1-GPU throughputs on
    A and B (samples/s, positive). ``nodes`` (A's node counts) only fixes the output shape; see the module doc.
    """
    if not (np.isfinite(x1_a) and np.isfinite(x1_b) and x1_a > 0.0 and x1_b > 0.0):
        raise ValueError(f"x1_a = {x1_a!r}, x1_b = {x1_b!r}; expected positive finite throughputs")
    shape = np.broadcast_shapes(np.shape(nodes), np.shape(replicas))
    k = np.broadcast_to(np.asarray(replicas, dtype=np.int64), shape)
    nodes_b, reps_b = projected_shapes(k.reshape(-1), gpus_per_node_b, unit_b)
    g = np.asarray(goodput_b(nodes_b, reps_b), dtype=np.float64).reshape(shape)
    return np.asarray(g * (x1_a / x1_b), dtype=np.float64)


def scale_choice(choice: BatchChoice, ratio: float) -> BatchChoice:
    """A batch choice made on type B, moved to type A whose GPUs are ``ratio`` = x1_A/x1_B times as fast.

    Goodput and progress rate are multiplied by ``ratio`` and the step time divided by it; the batch
    configuration (b, s, M) is kept, so goodput = M·E / T_iter still holds.
    """
    if not (np.isfinite(ratio) and ratio > 0.0):
        raise ValueError(f"throughput ratio {ratio!r}; expected a positive finite number")
    return BatchChoice(
        goodput=np.asarray(choice.goodput * ratio, dtype=np.float64),
        local_bsz=np.asarray(choice.local_bsz, dtype=np.int64).copy(),
        accum_steps=np.asarray(choice.accum_steps, dtype=np.int64).copy(),
        batch=np.asarray(choice.batch, dtype=np.int64).copy(),
        iter_time_s=np.asarray(choice.iter_time_s / ratio, dtype=np.float64),
        progress_rate=np.asarray(choice.progress_rate * ratio, dtype=np.float64),
    )
