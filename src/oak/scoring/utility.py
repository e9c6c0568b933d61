"""Composite utility of paper §III-B/C, vectorised over jobs × configurations."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError
from oak.model.snapshot import FloatArray, RoundSnapshot
from oak.scoring.sia import SIA_DEFAULT_RESTART_COST_S, SIA_RESTART_COST_S, sia_restart_factor


class RestartFactor(StrEnum):
    """Which restart factor r multiplies goodput."""

    DECOMPOSED = "decomposed"  # OAK: T_progress / (T_progress + T_ckpt + P)
    AGGREGATE = "aggregate"  # Pollux/Sia-style: max(A − n·P, 0) / (A + P)
    OFF = "off"  # r = 1
    SIA = "sia"  # Sia's max(T − n·S, 0) / (T + S), S per application, on every configuration but the current one


@dataclass(frozen=True)
class UtilityParams:
    """Parameters of U = (G·r)^p · K and of the per-round objective.

    p: fairness exponent (≥ 0). alpha: age-key sensitivity (1/s). k_max: age-key cap (≥ 1).
    mu_na: objective value of leaving a job unallocated. age_key: switch K on/off (off ⇒ K = 1).
    restart_penalty_s: if set, the P_restart (s) the restart factor assumes for every job instead of each
    job's own (the §V-A sensitivity sweep); the simulator's restore physics is unaffected.
    """

    p: float = 0.5
    alpha: float = 0.01
    k_max: float = 100.0
    mu_na: float = 1.1
    age_key: bool = True
    restart_factor: RestartFactor = RestartFactor.DECOMPOSED
    restart_penalty_s: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.p) or self.p < 0:
            raise OakInputError(
                f"utility parameter p={self.p!r}: expected a finite number >= 0 "
                "(negative p makes (G·r)^p diverge as r → 0; paper §III-B)"
            )
        if not math.isfinite(self.alpha) or self.alpha < 0:
            raise OakInputError(f"utility parameter alpha={self.alpha!r}: expected a finite number >= 0 (1/s)")
        if not math.isfinite(self.k_max) or self.k_max < 1:
            raise OakInputError(f"utility parameter k_max={self.k_max!r}: expected a finite number >= 1")
        if self.restart_penalty_s is not None and not (
            math.isfinite(self.restart_penalty_s) and self.restart_penalty_s >= 0
        ):
            raise OakInputError(
                f"utility parameter restart_penalty_s={self.restart_penalty_s!r}: expected a number of seconds >= 0"
            )
        if not math.isfinite(self.mu_na):
            raise OakInputError(f"utility parameter mu_na={self.mu_na!r}: expected a finite number")


def utility_params(owner: str, **kwargs: Any) -> UtilityParams:
    """UtilityParams from keywords (``restart_factor`` may be given by name); unknown keywords are an error
    naming ``owner`` (the policy they were meant for)."""
    unknown = set(kwargs) - {f.name for f in fields(UtilityParams)}
    if unknown:
        raise TypeError(f"unknown {owner} parameters: {sorted(unknown)}")
    if "restart_factor" in kwargs:
        kwargs["restart_factor"] = RestartFactor(kwargs["restart_factor"])
    return UtilityParams(**kwargs)


def restart_factor_decomposed(
    t_progress_s: npt.ArrayLike, t_ckpt_s: npt.ArrayLike, penalty_s: npt.ArrayLike
) -> FloatArray:
    """r = max(T_progress, 0) / (T_progress + T_ckpt + P), and r = 1 while T_progress < P (paper §III-C)."""
    tp = np.asarray(t_progress_s, dtype=np.float64)
    tc = np.asarray(t_ckpt_s, dtype=np.float64)
    pen = np.asarray(penalty_s, dtype=np.float64)
    denom = tp + tc + pen
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(denom > 0, np.maximum(tp, 0.0) / denom, 1.0)
    return np.where(tp < pen, 1.0, r)


def restart_factor_aggregate(age_s: npt.ArrayLike, restarts: npt.ArrayLike, penalty_s: npt.ArrayLike) -> FloatArray:
    """r = max(A − n·P, 0) / (A + P), and r = 1 while A < P (paper §IV-D, §V-D; Pollux/Sia form)."""
    a = np.asarray(age_s, dtype=np.float64)
    n = np.asarray(restarts, dtype=np.float64)
    pen = np.asarray(penalty_s, dtype=np.float64)
    denom = a + pen
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(denom > 0, np.maximum(a - n * pen, 0.0) / denom, 1.0)
    return np.where(a < pen, 1.0, r)


def age_key(t_queue_s: npt.ArrayLike, alpha: float, k_max: float) -> FloatArray:
    """K = min(exp(α·T_queue), K_max) (paper §III-C); computed without overflow."""
    tq = np.asarray(t_queue_s, dtype=np.float64)
    return np.minimum(np.exp(np.minimum(alpha * np.maximum(tq, 0.0), math.log(k_max))), k_max)


def composite_utility(goodput: FloatArray, r: FloatArray, k: FloatArray, p: float) -> FloatArray:
    """U_ij = (G_ij · r_i)^p · K_i for a (J, C) goodput matrix and per-job r, K."""
    base = goodput * r[:, None]
    return np.power(base, p) * k[:, None]


def utility_matrix(snap: RoundSnapshot, params: UtilityParams) -> FloatArray:
    """The (J, C) utility matrix of a snapshot; entries of invalid configurations are 0."""
    penalty = (
        snap.restart_penalty_s if params.restart_penalty_s is None else np.full(snap.num_jobs, params.restart_penalty_s)
    )
    if params.restart_factor is RestartFactor.DECOMPOSED:
        r = restart_factor_decomposed(snap.t_progress_s, snap.t_ckpt_s, penalty)
    elif params.restart_factor is RestartFactor.AGGREGATE:
        r = restart_factor_aggregate(snap.age_s, snap.restarts, penalty)
    elif params.restart_factor is RestartFactor.SIA:
        k = age_key(snap.t_queue_s, params.alpha, params.k_max) if params.age_key else np.ones(snap.num_jobs)
        return np.where(snap.valid, np.power(snap.goodput * sia_move_factor(snap), params.p) * k[:, None], 0.0)
    else:
        r = np.ones(snap.num_jobs)
    k = age_key(snap.t_queue_s, params.alpha, params.k_max) if params.age_key else np.ones(snap.num_jobs)
    u = composite_utility(snap.goodput, r, k, params.p)
    return np.where(snap.valid, u, 0.0)


def sia_move_factor(snap: RoundSnapshot) -> FloatArray:
    """(J, C) Sia's reallocation factor (``oak.policies.sia``) on every configuration but the job's current one
    (1 there), as Sia applies it: a job whose factor fell can keep what it holds but hardly move."""
    cost = np.array([SIA_RESTART_COST_S.get(a, SIA_DEFAULT_RESTART_COST_S) for a in snap.applications])
    r = sia_restart_factor(snap.age_s, snap.restarts.astype(np.float64), cost)
    m = np.repeat(r[:, None], snap.num_configs, axis=1)
    held = np.flatnonzero(snap.current >= 0)
    m[held, snap.current[held]] = 1.0
    return m
