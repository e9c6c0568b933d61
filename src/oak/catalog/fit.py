"""Fit the throughput model to step-time observations (baselines.md §1.2; the Pollux/AdaptDL fitter).

Loss over the observations i (all logs natural):

    L(θ) = RMSE_i(log T_c(b_i), log T_acc,i) + RMSE_i(log T_sync(b_i, N_i, R_i), log T_step,i)
           + 1e-3·(γ − 1)² + 1e-2·[(β_n/α_n)² + (β_r/α_r)²]

minimised with L-BFGS-B (scipy) and an exact analytic gradient, from α = 0.1, β = 0.01, γ = 1.001 with bounds
α, β ≥ 1e-8 and 1 ≤ γ ≤ 10. Parameters the data cannot identify are frozen (see :func:`frozen_mask`), and without
multi-node data the prior α_n ≥ 1.1·α_r, β_n ≥ 1.1·β_r is applied after the fit. Deterministic; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy
from scipy.optimize import Bounds, minimize

from oak.catalog.profiles import Observations
from oak.goodput.throughput import SINGLE_REPLICA_NETWORK_TIME_S, ThroughputParams

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

PARAM_LOWER = 1e-8
GAMMA_MIN = 1.0
GAMMA_MAX = 10.0
INIT_ALPHA = 0.1
INIT_BETA = 0.01
INIT_GAMMA = 1.001
REG_GAMMA = 1e-3
REG_RETROGRESSION = 1e-2
PRIOR_INTER_OVER_INTRA = 1.1
#: L-BFGS-B stopping settings (tighter than scipy's defaults so the fit is converged, not just stopped).
FTOL = 1e-13
GTOL = 1e-10
MAXITER = 20000
MAXCOR = 10
#: Extra deterministic starting points (α, β, γ) tried after the reference start; the lowest loss wins (ties: the
#: earlier start). L-BFGS-B can stop in a poor local minimum of this non-convex loss (e.g. at γ ≈ 10).
EXTRA_STARTS: tuple[tuple[float, float, float], ...] = (
    (0.1, 0.01, 2.0),
    (0.1, 0.01, 4.0),
    (0.01, 0.001, 1.001),
    (0.01, 0.001, 2.0),
    (0.01, 0.001, 4.0),
)
#: The optimiser works on θ / PARAM_SCALE so that all variables are O(1) (the loss is unchanged).
_PARAM_SCALE = np.array([1e-2, 1e-4, 1e-2, 1e-3, 1e-2, 1e-3, 1.0])

# Indices into the parameter vector (α_c, β_c, α_n, β_n, α_r, β_r, γ).
AC, BC, AN, BN, AR, BR, G = range(7)


def fitter_settings() -> dict[str, object]:
    """The fitter's configuration, recorded in the catalog provenance."""
    return {
        "algorithm": "L-BFGS-B (scipy.optimize.minimize), analytic gradient",
        "scipy_version": scipy.__version__,
        "numpy_version": np.__version__,
        "loss": "RMSE(log Tc, log T_acc) + RMSE(log T_sync, log T_step) + 1e-3 (gamma-1)^2"
        " + 1e-2 ((beta_n/alpha_n)^2 + (beta_r/alpha_r)^2)",
        "init": {"alpha": INIT_ALPHA, "beta": INIT_BETA, "gamma": INIT_GAMMA},
        "bounds": {"alpha_beta_min": PARAM_LOWER, "gamma": [GAMMA_MIN, GAMMA_MAX]},
        "ftol": FTOL,
        "gtol": GTOL,
        "maxiter": MAXITER,
        "maxcor": MAXCOR,
        "variable_scale": [float(x) for x in _PARAM_SCALE],
        "extra_starts_alpha_beta_gamma": [list(x) for x in EXTRA_STARTS],
        "frozen": "one distinct b: alpha_c = mean(T_acc)/2; no N>1: alpha_n, beta_n = 1e-8; "
        "no N=1,R>1: alpha_r, beta_r = 1e-8; no R>2: beta_n, beta_r = 1e-8",
        "prior": "no N>1 data: alpha_n >= 1.1 alpha_r, beta_n >= 1.1 beta_r",
        "observations": "keys (N, R, b), first row wins, placements then scalability rows",
    }


@dataclass(frozen=True)
class FitResult:
    """Outcome of one fit.

    Attributes:
        params: fitted parameters (after the prior).
        loss: loss at the fitted parameters (before the prior).
        rmsle_step: RMS log error of the synchronising-step time at ``params``.
        rmsle_acc: RMS log error of the accumulation-step time at ``params``.
        median_rel_err_step: median |pred − obs|/obs of the synchronising-step time at ``params``.
        n_observations: number of observations.
        iterations: L-BFGS-B iterations, summed over all starting points.
        converged: whether scipy reported success for the chosen start.
    """

    params: ThroughputParams
    loss: float
    rmsle_step: float
    rmsle_acc: float
    median_rel_err_step: float
    n_observations: int
    iterations: int
    converged: bool


def _network(theta: FloatArray, nodes: FloatArray, replicas: FloatArray) -> tuple[FloatArray, BoolArray, BoolArray]:
    extra = np.maximum(replicas - 2.0, 0.0)
    intra = (replicas > 1.0) & (nodes <= 1.0)
    inter = (replicas > 1.0) & (nodes > 1.0)
    tn = np.where(
        intra,
        theta[AR] + theta[BR] * extra,
        np.where(inter, theta[AN] + theta[BN] * extra, SINGLE_REPLICA_NETWORK_TIME_S),
    )
    return tn, intra, inter


def loss_and_grad(theta: FloatArray, obs: Observations) -> tuple[float, FloatArray]:
    """The fitting loss L(θ) and its exact gradient dL/dθ (θ in field order of ThroughputParams)."""
    b = obs.local_bsz.astype(np.float64)
    nodes = obs.nodes.astype(np.float64)
    replicas = obs.replicas.astype(np.float64)
    extra = np.maximum(replicas - 2.0, 0.0)
    n = float(b.shape[0])
    g = float(theta[G])

    tc = theta[AC] + theta[BC] * b
    tn, intra, inter = _network(theta, nodes, replicas)
    m = np.maximum(tc, tn)
    uc = (tc / m) ** g
    un = (tn / m) ** g
    u = uc + un
    log_ts = np.log(m) + np.log(u) / g
    wc = uc / u  # = (Tc/Ts)^γ
    wn = un / u
    log_tc = np.log(tc)
    log_tn = np.log(tn)

    r1 = log_tc - np.log(obs.acc_time)
    r2 = log_ts - np.log(obs.step_time)
    err1 = float(np.sqrt(np.mean(r1 * r1)))
    err2 = float(np.sqrt(np.mean(r2 * r2)))
    reg_g = REG_GAMMA * (g - 1.0) ** 2
    reg_r = REG_RETROGRESSION * ((theta[BN] / theta[AN]) ** 2 + (theta[BR] / theta[AR]) ** 2)
    loss = err1 + err2 + reg_g + float(reg_r)

    c1 = r1 / (n * err1) if err1 > 0.0 else np.zeros_like(r1)
    c2 = r2 / (n * err2) if err2 > 0.0 else np.zeros_like(r2)
    # d log Tc / d(α_c, β_c) = (1, b)/Tc; d log Ts / dTc = wc/Tc; d log Ts / dTn = wn/Tn.
    dtc = c1 / tc + c2 * wc / tc
    dtn = c2 * wn / tn
    grad = np.zeros(7)
    grad[AC] = np.sum(dtc)
    grad[BC] = np.sum(dtc * b)
    grad[AR] = np.sum(dtn * intra)
    grad[BR] = np.sum(dtn * intra * extra)
    grad[AN] = np.sum(dtn * inter)
    grad[BN] = np.sum(dtn * inter * extra)
    grad[G] = np.sum(c2 * (wc * log_tc + wn * log_tn - log_ts) / g) + 2.0 * REG_GAMMA * (g - 1.0)
    grad[BN] += 2.0 * REG_RETROGRESSION * theta[BN] / theta[AN] ** 2
    grad[AN] -= 2.0 * REG_RETROGRESSION * theta[BN] ** 2 / theta[AN] ** 3
    grad[BR] += 2.0 * REG_RETROGRESSION * theta[BR] / theta[AR] ** 2
    grad[AR] -= 2.0 * REG_RETROGRESSION * theta[BR] ** 2 / theta[AR] ** 3
    return loss, grad


def frozen_mask(obs: Observations) -> tuple[BoolArray, FloatArray]:
    """Which parameters the observations cannot identify, and the initial point with frozen values set.

    * one distinct b: α_c frozen at mean(T_acc)/2;
    * no observation with N > 1: α_n, β_n frozen at 1e-8;
    * no observation with N = 1 and R > 1: α_r, β_r frozen at 1e-8;
    * no observation with R > 2: β_n, β_r frozen at 1e-8.
    """
    init = np.array([INIT_ALPHA, INIT_BETA] * 3 + [INIT_GAMMA])
    frozen = np.zeros(7, dtype=bool)
    if np.unique(obs.local_bsz).shape[0] == 1:
        frozen[AC] = True
        init[AC] = float(np.mean(obs.acc_time)) / 2.0
    if not np.any(obs.nodes > 1):
        frozen[[AN, BN]] = True
        init[[AN, BN]] = PARAM_LOWER
    if not np.any((obs.nodes == 1) & (obs.replicas > 1)):
        frozen[[AR, BR]] = True
        init[[AR, BR]] = PARAM_LOWER
    if not np.any(obs.replicas > 2):
        frozen[[BN, BR]] = True
        init[[BN, BR]] = PARAM_LOWER
    return frozen, init


def predict_times(p: ThroughputParams, obs: Observations) -> tuple[FloatArray, FloatArray]:
    """Predicted (accumulation-step, synchronising-step) times at the observations' keys (seconds)."""
    theta = p.as_array()
    b = obs.local_bsz.astype(np.float64)
    tc = theta[AC] + theta[BC] * b
    tn, _, _ = _network(theta, obs.nodes.astype(np.float64), obs.replicas.astype(np.float64))
    m = np.maximum(tc, tn)
    ts = m * ((tc / m) ** p.gamma + (tn / m) ** p.gamma) ** (1.0 / p.gamma)
    return np.asarray(tc, dtype=np.float64), np.asarray(ts, dtype=np.float64)


def fit_quality(p: ThroughputParams, obs: Observations) -> tuple[float, float, float]:
    """(RMSLE of the sync-step time, RMSLE of the accumulation-step time, median abs. rel. error of step time)."""
    tc, ts = predict_times(p, obs)
    rmsle_step = float(np.sqrt(np.mean((np.log(ts) - np.log(obs.step_time)) ** 2)))
    rmsle_acc = float(np.sqrt(np.mean((np.log(tc) - np.log(obs.acc_time)) ** 2)))
    med = float(np.median(np.abs(ts - obs.step_time) / obs.step_time))
    return rmsle_step, rmsle_acc, med


def fit_throughput(obs: Observations) -> FitResult:
    """Fit the seven throughput parameters to ``obs`` (see module docstring)."""
    if len(obs) == 0:
        raise ValueError("cannot fit a throughput model to zero observations")
    frozen, init = frozen_mask(obs)
    lower = np.full(7, PARAM_LOWER)
    upper = np.full(7, np.inf)
    lower[G], upper[G] = GAMMA_MIN, GAMMA_MAX
    lower[frozen] = init[frozen]
    upper[frozen] = init[frozen]
    scale = _PARAM_SCALE

    def objective(x: FloatArray) -> tuple[float, FloatArray]:
        value, grad = loss_and_grad(x * scale, obs)
        grad = grad * scale
        grad[frozen] = 0.0
        return value, grad

    starts = [init]
    for alpha, beta, gamma in EXTRA_STARTS:
        x0 = np.array([alpha, beta] * 3 + [gamma])
        x0[frozen] = init[frozen]
        starts.append(x0)
    best: tuple[float, FloatArray, int, bool] | None = None
    iterations = 0
    for x0 in starts:
        result = minimize(
            objective,
            x0 / scale,
            jac=True,
            method="L-BFGS-B",
            bounds=Bounds(lower / scale, upper / scale, keep_feasible=True),
            options={"ftol": FTOL, "gtol": GTOL, "maxiter": MAXITER, "maxcor": MAXCOR},
        )
        iterations += int(result.nit)
        cand = np.clip(np.asarray(result.x, dtype=np.float64) * scale, lower, upper)
        cand[frozen] = init[frozen]
        value = float(loss_and_grad(cand, obs)[0])
        if best is None or value < best[0]:
            best = (value, cand, int(result.nit), bool(result.success))
    assert best is not None
    loss, theta, _, converged = best
    theta = theta.copy()
    if not np.any(obs.nodes > 1):
        theta[AN] = max(theta[AN], PRIOR_INTER_OVER_INTRA * theta[AR])
        theta[BN] = max(theta[BN], PRIOR_INTER_OVER_INTRA * theta[BR])
    params = ThroughputParams.from_array(theta)
    rmsle_step, rmsle_acc, med = fit_quality(params, obs)
    return FitResult(
        params=params,
        loss=loss,
        rmsle_step=rmsle_step,
        rmsle_acc=rmsle_acc,
        median_rel_err_step=med,
        n_observations=len(obs),
        iterations=iterations,
        converged=converged,
    )
