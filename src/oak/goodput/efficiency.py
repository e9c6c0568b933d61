"""Statistical efficiency of a global batch size from the gradient noise scale (baselines.md §2.2).

With batch scale S = M / M0, gradient statistics sqr ≈ |g|² and var ≈ tr(Σ)/M0:

    gain r(M)       = (var + sqr) / (var/S + sqr)      (base-batch iterations per optimiser step)
    efficiency E(M) = r(M) / S = (var + sqr) / (var + S·sqr) = (φ + M0)/(φ + M),  φ = M0·var/sqr

sqr is clipped to ≥ 0 and var to ≥ 1e-6; where the denominator is ≤ 0 the gain is 1 (so E = 1/S).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Lower clip of the gradient variance (as AdaptDL does when reading the statistics).
MIN_GRAD_VAR = 1e-6


def efficiency(
    grad_sqr: npt.ArrayLike, grad_var: npt.ArrayLike, m0: float | npt.ArrayLike, batch: npt.ArrayLike
) -> FloatArray:
    """Statistical efficiency E(M) in (0, 1] for M ≥ M0 (dimensionless; E(M0) = 1)."""
    sqr = np.maximum(np.asarray(grad_sqr, dtype=np.float64), 0.0)
    var = np.maximum(np.asarray(grad_var, dtype=np.float64), MIN_GRAD_VAR)
    scale = np.asarray(batch, dtype=np.float64) / np.asarray(m0, dtype=np.float64)
    denom = var + scale * sqr
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 0.0, (var + sqr) / np.where(denom > 0.0, denom, 1.0), 1.0 / scale)
    return np.asarray(out, dtype=np.float64)


def gain(
    grad_sqr: npt.ArrayLike, grad_var: npt.ArrayLike, m0: float | npt.ArrayLike, batch: npt.ArrayLike
) -> FloatArray:
    """Gain r(M) = E(M)·M/M0: base-batch (M0) iterations of progress made by one optimiser step at M."""
    scale = np.asarray(batch, dtype=np.float64) / np.asarray(m0, dtype=np.float64)
    return np.asarray(efficiency(grad_sqr, grad_var, m0, batch) * scale, dtype=np.float64)
