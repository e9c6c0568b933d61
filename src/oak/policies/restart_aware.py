"""The product's OAK: restart-aware for real (``oak``); the paper read literally is ``oak-paper`` (docs/model.md).

Each round it solves one exact program over (job, configuration) pairs, as the paper's OAK does:

    max Σ_ij x_ij · (U_ij − θ),   U_ij = (G_ij · m_ij)^p · K_i,   Σ_j x_ij ≤ 1,   GPUs per type ≤ capacity

with three departures from the literal reading, each measured (docs/model.md, "The product's OAK"):

* **Staying is free, moving pays.** m_ij = 1 for the configuration a job holds now, and for every configuration of
  a job that holds none (its restart is unavoidable); for a running job's other configurations
  m_ij = r_i · s_ij: r_i the paper's decomposed factor from *measured* T_progress and T_ckpt, s_ij = max(1 − D_i/H_ij, 0)
  the share of the remaining run H_ij = remaining work / rate in j that is left after paying the job's measured
  restore time D_i = T_ckpt / starts (P_restart before the first measurement). The paper's r multiplies every
  configuration of a job alike, so it lowers priority but never makes staying cheaper than moving.
* **Idling is never rewarded.** An allocation is worth U − θ with 0 ≤ θ < 1, and leaving a job out is worth 0:
  every valid configuration (U ≥ 1 at r = K = 1) beats idling, while θ > 0 lets the solver prefer one job on
  more GPUs to several on the minimum. The paper's μ_na = 1.1 > 1 *earns* 1.1 for leaving a job out, so a job
  whose U drops below 1.1 is preempted until its age key lifts it back: a thrash loop.
* **A restore is not interrupted**: a job inside its restore delay keeps its configuration (as Sia does).

The age key K is off by default (``age_key=False``): every variant measured — the paper's K on all jobs, K on
waiting jobs only, K from the current waiting streak — either raised mean JCT or made jobs preempt each other
round after round (docs/model.md). No I/O; a pure function of the snapshot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from oak.errors import OakInputError
from oak.model.snapshot import Allocation, FloatArray, RoundSnapshot, kept_while_restoring
from oak.scoring.utility import age_key, restart_factor_decomposed
from oak.solve import AssignmentProblem, solve_assignment


def switching_factor(snap: RoundSnapshot) -> FloatArray:
    """(J, C) s_ij = max(1 − D_i / H_ij, 0): the part of job i's remaining run in configuration j left after a
    restore of D_i seconds (its measured mean restore per start, P_restart before any is measured)."""
    starts = np.maximum(snap.restarts + 1, 1).astype(np.float64)
    restore = np.where(snap.t_ckpt_s > 0, snap.t_ckpt_s / starts, snap.restart_penalty_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        remaining = np.where(snap.progress_rate > 0, snap.remaining_work[:, None] / snap.progress_rate, np.inf)
        s = 1.0 - restore[:, None] / remaining
    return np.clip(np.where(np.isfinite(s), s, 0.0), 0.0, 1.0)


def move_factor(snap: RoundSnapshot, switching: bool = True) -> FloatArray:
    """(J, C) m_ij: 1 on a job's current configuration and for jobs without GPUs; r_i·s_ij elsewhere."""
    j, c = snap.goodput.shape
    held = np.flatnonzero(snap.current >= 0)
    r = restart_factor_decomposed(snap.t_progress_s, snap.t_ckpt_s, snap.restart_penalty_s)
    m = np.ones((j, c))
    m[held] = r[held, None]
    if switching:
        m[held] *= switching_factor(snap)[held]
    m[held, snap.current[held]] = 1.0
    return m


@dataclass(frozen=True)
class RestartAwareOakPolicy:
    """OAK as shipped (module docstring): p ≥ 0, admission cost θ ∈ [0, 1), optional age key (α, K_max)."""

    p: float = 0.5
    theta: float = 0.5
    age_key: bool = False
    alpha: float = 0.01
    k_max: float = 100.0
    switching: bool = True
    keep_restoring: bool = True
    solver: str = "auto"
    name: str = "oak"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.p) and self.p >= 0):
            raise OakInputError(f"oak: p={self.p!r}; expected a finite number >= 0")
        if not (math.isfinite(self.theta) and 0 <= self.theta < 1):
            raise OakInputError(
                f"oak: theta={self.theta!r}; expected a number in [0, 1) (at >= 1 the minimum configuration is "
                "worth less than idling)"
            )
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise OakInputError(f"oak: alpha={self.alpha!r}; expected a finite number >= 0 (1/s)")
        if not (math.isfinite(self.k_max) and self.k_max >= 1):
            raise OakInputError(f"oak: k_max={self.k_max!r}; expected a finite number >= 1")

    @property
    def reads_clock(self) -> bool:
        """Only the age key reads the clock (``t_queue_s``); the rest reads measured times, rates and work."""
        return self.age_key

    def utility(self, snap: RoundSnapshot) -> FloatArray:
        """(J, C) U_ij = (G_ij·m_ij)^p·K_i; 0 where invalid."""
        u = np.power(snap.goodput * move_factor(snap, self.switching), self.p)
        if self.age_key:
            u = u * age_key(snap.t_queue_s, self.alpha, self.k_max)[:, None]
        return np.where(snap.valid, u, 0.0)

    def decide(self, snap: RoundSnapshot) -> Allocation:
        problem = AssignmentProblem(
            value=np.where(snap.valid, self.utility(snap) - self.theta, 0.0),
            valid=snap.valid,
            gpus=snap.config_gpus,
            gpu_type=snap.config_type,
            capacity=snap.capacity,
            forced=kept_while_restoring(snap) if self.keep_restoring else None,
        )
        res = solve_assignment(problem, self.solver)
        info = {"solve_ms": res.wall_ms, "bound": res.bound, "gap": res.gap}
        return Allocation(config=res.choice, objective=res.objective, method=res.method, info=info)
