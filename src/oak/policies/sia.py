"""Faithful Sia (reference §5): the goodput MILP with p = −0.5, λ_n = 1.1 and Sia's reallocation factor.

Optimises Σ X·round((G·r)^p, 2) + λ_n·(#unallocated), minimised for p < 0; departs from Sia in using the
simulator's true goodput (no online fitting, no exploration cap) and OAK's exact solvers instead of CBC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from oak.errors import OakInputError
from oak.model.snapshot import (
    Allocation,
    FloatArray,
    RoundSnapshot,
    forced_configs,
    kept_while_restoring,
    preferred_configs,
)
from oak.policies.base import PolicyBase
from oak.scoring.sia import SIA_DEFAULT_RESTART_COST_S, SIA_RESTART_COST_S, sia_restart_factor
from oak.solve import AssignmentProblem, solve_assignment

ZERO_ALLOC_GAIN = 1e-4
UTILITY_CLIP = 3000.0


@dataclass(frozen=True)
class SiaPolicy(PolicyBase):
    """Sia's policy: fairness exponent p (default −0.5), no-allocation cost λ_n (default 1.1)."""

    p: float = -0.5
    lambda_n: float = 1.1
    restart_costs_s: Mapping[str, float] = field(default_factory=lambda: dict(SIA_RESTART_COST_S))
    solver: str = "auto"
    name: str = "sia"

    def __post_init__(self) -> None:
        if self.p == 0 or not np.isfinite(self.p):
            raise OakInputError(f"sia: p={self.p!r}; expected a finite non-zero number (default −0.5)")
        if abs(self.lambda_n) <= 1:
            raise OakInputError(f"sia: lambda_n={self.lambda_n!r}; expected |λ_n| > 1 (reference §5.3)")

    def utility(self, snap: RoundSnapshot) -> FloatArray:
        """A_ij = round((G_ij·r_ij)^p, 2) clipped at 3000, r applied off the current configuration."""
        cost = np.array(
            [self.restart_costs_s.get(a, SIA_DEFAULT_RESTART_COST_S) for a in snap.applications],
            dtype=np.float64,
        )
        r = sia_restart_factor(snap.age_s, snap.restarts.astype(np.float64), cost)
        g = snap.goodput * r[:, None]
        held = np.flatnonzero(snap.current >= 0)
        g[held, snap.current[held]] = snap.goodput[held, snap.current[held]]
        g = np.where(snap.valid, np.maximum(g, ZERO_ALLOC_GAIN), ZERO_ALLOC_GAIN)
        return np.minimum(np.round(np.power(g, self.p), 2), UTILITY_CLIP)

    def decide(self, snap: RoundSnapshot) -> Allocation:
        a = self.utility(snap)
        lam = abs(self.lambda_n)
        value = lam - a if self.p < 0 else a + lam
        problem = AssignmentProblem(
            value=value,
            valid=snap.valid,
            gpus=snap.config_gpus,
            gpu_type=snap.config_type,
            capacity=snap.capacity,
            forced=forced_configs(snap, kept_while_restoring(snap)),
            prefer=preferred_configs(snap),
            warm_prices=snap.solver_prices,
        )
        res = solve_assignment(problem, self.solver)
        objective = lam * snap.num_jobs - res.objective if self.p < 0 else res.objective - lam * snap.num_jobs
        # bound: the solver's bound on the optimum in this objective's units (a lower bound when p < 0, the
        # objective then being minimised); gap: its certified relative gap
        bound = lam * snap.num_jobs - res.bound if self.p < 0 else res.bound - lam * snap.num_jobs
        info = {"solve_ms": res.wall_ms, "bound": bound, "gap": res.gap, "warm": float(res.warm)}
        # values: λ − A, what the program maximises
        return Allocation(
            config=res.choice, objective=objective, method=res.method, info=info, values=value, prices=res.prices
        )
