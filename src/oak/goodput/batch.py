"""Best global batch size and gradient accumulation for an allocation (N, R): the Pollux/Sia grid search.

Reference: baselines.md §2.3–§2.4. For every allocation, 50 geometrically spaced global batch sizes in
[M_lo, M_max] with M_lo = max(M0, b_min·R) are tried; for each candidate M the local batch ℓ = M/R is split into
s extra accumulation micro-steps of atomic size b (b ≤ b_max, and s ≥ 1 when R = 1 and ℓ > M0), b is capped so
that R·b·(s+1) ≤ M_max, and the goodput X·E at the realised M = R·b·(s+1) is evaluated (0 when b ∉ [b_min, b_max]).
The argmax over candidates is returned, vectorised over all allocations at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from oak.goodput.efficiency import efficiency, gain
from oak.goodput.throughput import ThroughputParams, iteration_time

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Maps an array of global batch sizes M (samples) to the gradient statistic at M, same shape.
GradStatFn = Callable[[FloatArray], FloatArray]

#: Tolerance of the ceil/floor operations of the grid search.
ROUNDING_EPS = 1e-8
#: Number of candidate global batch sizes in the Pollux/Sia search.
DEFAULT_CANDIDATES = 50


@dataclass(frozen=True, eq=False)
class BatchChoice:
    """Best batch configuration per allocation; all arrays share the allocations' shape.

    A zero ``goodput`` / ``progress_rate`` marks an infeasible allocation; its other fields are then 0 too.

    Attributes:
        goodput: X·E in M0-equivalent samples/s (uncalibrated).
        local_bsz: atomic per-GPU batch b (samples).
        accum_steps: extra accumulation micro-steps s per optimiser step.
        batch: realised global batch M = R·b·(s+1) (samples).
        iter_time_s: time of one optimiser step T_iter (seconds).
        progress_rate: base-batch iterations per second, gain(M)/T_iter (= goodput/M0; uncalibrated).
    """

    goodput: FloatArray
    local_bsz: IntArray
    accum_steps: IntArray
    batch: IntArray
    iter_time_s: FloatArray
    progress_rate: FloatArray

    @property
    def feasible(self) -> npt.NDArray[np.bool_]:
        """True where the allocation can run this job (positive goodput)."""
        return np.asarray(self.goodput > 0.0)


@dataclass(frozen=True, eq=False)
class BatchGrid:
    """The epoch-independent part of the search: for K allocations × n candidates, the realised batch (b, s,
    M) and the iteration time T_iter (seconds), and which candidates are admissible. Computing it once per
    (application, GPU type) and reusing it for every epoch gives results identical to :func:`best_batch`."""

    shape: tuple[int, ...]
    b: FloatArray
    s: FloatArray
    m_real: FloatArray
    t_iter: FloatArray
    admissible: npt.NDArray[np.bool_]


def batch_grid(
    params: ThroughputParams,
    m0: float,
    m_max: float,
    b_min: float,
    b_max: float,
    nodes: npt.ArrayLike,
    replicas: npt.ArrayLike,
    n_candidates: int = DEFAULT_CANDIDATES,
) -> BatchGrid:
    """Candidate grid of :func:`best_batch` (same arguments, without the gradient statistics)."""
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
    shape = np.broadcast_shapes(np.shape(nodes), np.shape(replicas))
    n_alloc = np.broadcast_to(np.asarray(nodes, dtype=np.float64), shape).reshape(-1)
    r_alloc = np.broadcast_to(np.asarray(replicas, dtype=np.float64), shape).reshape(-1)
    valid = (r_alloc >= 1.0) & (n_alloc >= 1.0)
    r_safe = np.where(valid, r_alloc, 1.0)
    n_safe = np.where(valid, n_alloc, 1.0)
    m_lo = np.maximum(float(m0), float(b_min) * r_safe)
    valid &= m_lo <= m_max
    m_lo = np.where(valid, m_lo, float(m_max))

    # (K, n) candidate grid.
    cand = np.geomspace(m_lo, np.full_like(m_lo, float(m_max)), n_candidates, axis=1)
    r = r_safe[:, None]
    n = n_safe[:, None]
    local = cand / r
    s = np.maximum(np.ceil(local / b_max - ROUNDING_EPS) - 1.0, 0.0)
    s = np.where((r == 1.0) & (local > m0), np.maximum(s, 1.0), s)
    b = np.ceil(local / (s + 1.0) - ROUNDING_EPS)
    over = r * b * (s + 1.0) > m_max
    b = np.where(over, np.floor(m_max / (r * (s + 1.0)) + ROUNDING_EPS), b)
    m_real = r * b * (s + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_iter = iteration_time(params, n, r, b, s)
    admissible = valid[:, None] & (b >= b_min) & (b <= b_max)
    return BatchGrid(shape=shape, b=b, s=s, m_real=m_real, t_iter=t_iter, admissible=admissible)


def best_from_grid(grid: BatchGrid, m0: float, grad_sqr_at: GradStatFn, grad_var_at: GradStatFn) -> BatchChoice:
    """The argmax of goodput X·E over ``grid``'s candidates for one set of gradient statistics (one epoch)."""
    b, s, m_real, t_iter, shape = grid.b, grid.s, grid.m_real, grid.t_iter, grid.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        sqr = np.asarray(grad_sqr_at(m_real), dtype=np.float64)
        var = np.asarray(grad_var_at(m_real), dtype=np.float64)
        eff = efficiency(sqr, var, m0, m_real)
        good = m_real / t_iter * eff
    ok = grid.admissible & np.isfinite(good)
    good = np.where(ok, good, 0.0)

    idx = np.argmax(good, axis=1)
    rows = np.arange(good.shape[0])
    best = good[rows, idx]
    feas = best > 0.0
    b_best = np.where(feas, b[rows, idx], 0.0)
    s_best = np.where(feas, s[rows, idx], 0.0)
    m_best = np.where(feas, m_real[rows, idx], 0.0)
    t_best = np.where(feas, t_iter[rows, idx], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        g_best = gain(sqr[rows, idx], var[rows, idx], m0, m_real[rows, idx])
        rate = np.where(feas, g_best / np.where(feas, t_best, 1.0), 0.0)

    return BatchChoice(
        goodput=best.reshape(shape),
        local_bsz=b_best.astype(np.int64).reshape(shape),
        accum_steps=s_best.astype(np.int64).reshape(shape),
        batch=m_best.astype(np.int64).reshape(shape),
        iter_time_s=t_best.reshape(shape),
        progress_rate=rate.reshape(shape),
    )


def best_batch(
    params: ThroughputParams,
    m0: float,
    m_max: float,
    b_min: float,
    b_max: float,
    grad_sqr_at: GradStatFn,
    grad_var_at: GradStatFn,
    nodes: npt.ArrayLike,
    replicas: npt.ArrayLike,
    n_candidates: int = DEFAULT_CANDIDATES,
) -> BatchChoice:
    """Exhaustive 50-point search of (b, s) maximising goodput for every allocation (nodes[k], replicas[k]).

    Args:
        params: fitted throughput model of the job on this GPU type.
        m0: base global batch size M0 (samples).
        m_max: largest allowed global batch size M_max (samples).
        b_min, b_max: allowed atomic batch range (samples).
        grad_sqr_at, grad_var_at: gradient statistics (sqr, var) at an array of global batch sizes.
        nodes, replicas: allocations, broadcast together; N ≥ 1 and R ≥ 1 for a feasible allocation.
        n_candidates: number of geometrically spaced candidate global batch sizes.

    Returns:
        The argmax per allocation; infeasible allocations (M_lo > M_max, R < 1, or no candidate with
        b in [b_min, b_max]) have all fields 0.
    """
    grid = batch_grid(params, m0, m_max, b_min, b_max, nodes, replicas, n_candidates)
    return best_from_grid(grid, m0, grad_sqr_at, grad_var_at)
