"""Pollux/Sia throughput model: iteration time of one optimiser step as a function of (N, R, b, s).

Reference: baselines.md §1.1. Notation: N nodes, R data-parallel replicas, b atomic (per-GPU) batch,
s extra gradient-accumulation micro-steps per optimiser step, M = R·b·(s+1) global batch.

    T_c(b)      = α_c + β_c·b                                       (compute of one micro-step, seconds)
    T_n(N, R)   = 1e-8 if R = 1; α_r + β_r·max(R−2, 0) if N = 1; α_n + β_n·max(R−2, 0) if N ≥ 2 (seconds)
    T_iter      = s·T_c + (T_c^γ + T_n^γ)^(1/γ)                     (seconds)
    X           = R·b·(s+1) / T_iter                                (samples/s)

All functions are pure, vectorised and broadcast their array arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: All-reduce time of a single replica (seconds): no communication, kept positive for the γ-norm and logs.
SINGLE_REPLICA_NETWORK_TIME_S = 1e-8


@dataclass(frozen=True)
class ThroughputParams:
    """The seven fitted parameters θ of the throughput model.

    Attributes:
        alpha_c: constant compute time of one micro-step (seconds).
        beta_c: compute time per sample of the atomic batch (seconds/sample).
        alpha_n: inter-node all-reduce base time (seconds), used when N ≥ 2.
        beta_n: inter-node all-reduce time per replica beyond 2 (seconds/replica).
        alpha_r: intra-node all-reduce base time (seconds), used when N = 1 and R ≥ 2.
        beta_r: intra-node all-reduce time per replica beyond 2 (seconds/replica).
        gamma: compute/communication overlap exponent in [1, 10] (1 = no overlap, 10 ≈ full overlap).
    """

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def as_array(self) -> FloatArray:
        """The parameters as a float array in field order (α_c, β_c, α_n, β_n, α_r, β_r, γ)."""
        return np.array(
            [self.alpha_c, self.beta_c, self.alpha_n, self.beta_n, self.alpha_r, self.beta_r, self.gamma],
            dtype=np.float64,
        )

    @classmethod
    def from_array(cls, values: npt.ArrayLike) -> ThroughputParams:
        """Build from 7 values in field order (α_c, β_c, α_n, β_n, α_r, β_r, γ)."""
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if v.shape != (7,):
            raise ValueError(f"ThroughputParams needs 7 values, got {v.shape[0]}")
        return cls(*(float(x) for x in v))


def compute_time(p: ThroughputParams, local_bsz: npt.ArrayLike) -> FloatArray:
    """Compute time T_c(b) = α_c + β_c·b of one micro-step with atomic batch ``local_bsz`` (seconds)."""
    b = np.asarray(local_bsz, dtype=np.float64)
    return np.asarray(p.alpha_c + p.beta_c * b, dtype=np.float64)


def network_time(p: ThroughputParams, nodes: npt.ArrayLike, replicas: npt.ArrayLike) -> FloatArray:
    """All-reduce time T_n(N, R) of one synchronising step (seconds).

    1e-8 for a single replica, the intra-node link (α_r, β_r) when all replicas share one node, otherwise the
    inter-node link (α_n, β_n); the β term grows with max(R − 2, 0).
    """
    n = np.asarray(nodes, dtype=np.float64)
    r = np.asarray(replicas, dtype=np.float64)
    extra = np.maximum(r - 2.0, 0.0)
    intra = p.alpha_r + p.beta_r * extra
    inter = p.alpha_n + p.beta_n * extra
    out = np.where(r <= 1.0, SINGLE_REPLICA_NETWORK_TIME_S, np.where(n <= 1.0, intra, inter))
    return np.asarray(out, dtype=np.float64)


def sync_step_time(p: ThroughputParams, t_compute: npt.ArrayLike, t_network: npt.ArrayLike) -> FloatArray:
    """γ-norm overlap (T_c^γ + T_n^γ)^(1/γ) of compute and all-reduce (seconds), computed without overflow."""
    tc = np.asarray(t_compute, dtype=np.float64)
    tn = np.asarray(t_network, dtype=np.float64)
    g = p.gamma
    m = np.maximum(tc, tn)
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(m > 0.0, m, 1.0)
        out = m * ((tc / safe) ** g + (tn / safe) ** g) ** (1.0 / g)
    return np.asarray(np.where(m > 0.0, out, 0.0), dtype=np.float64)


def iteration_time(
    p: ThroughputParams,
    nodes: npt.ArrayLike,
    replicas: npt.ArrayLike,
    local_bsz: npt.ArrayLike,
    accum_steps: npt.ArrayLike,
) -> FloatArray:
    """Time of one optimiser step T_iter = s·T_c(b) + (T_c(b)^γ + T_n(N,R)^γ)^(1/γ) (seconds)."""
    tc = compute_time(p, local_bsz)
    tn = network_time(p, nodes, replicas)
    s = np.asarray(accum_steps, dtype=np.float64)
    return np.asarray(s * tc + sync_step_time(p, tc, tn), dtype=np.float64)


def throughput(
    p: ThroughputParams,
    nodes: npt.ArrayLike,
    replicas: npt.ArrayLike,
    local_bsz: npt.ArrayLike,
    accum_steps: npt.ArrayLike,
) -> FloatArray:
    """Training throughput X = R·b·(s+1) / T_iter (samples/s)."""
    r = np.asarray(replicas, dtype=np.float64)
    b = np.asarray(local_bsz, dtype=np.float64)
    s = np.asarray(accum_steps, dtype=np.float64)
    t = iteration_time(p, nodes, replicas, local_bsz, accum_steps)
    return np.asarray(r * b * (s + 1.0) / t, dtype=np.float64)
