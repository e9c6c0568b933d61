"""The paper's OAK read literally (``oak-paper``): maximise Σ x·U + μ_na·Σ(1 − Σ_j x) with U = (G·r)^p·K (paper
§III-B). Kept bit-identical for reproduction and its ablations; the product's ``oak`` is in ``restart_aware.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oak.model.snapshot import Allocation, RoundSnapshot, forced_configs, preferred_configs
from oak.policies.base import PolicyBase
from oak.scoring import RestartFactor, UtilityParams, utility_matrix, utility_params
from oak.solve import AssignmentProblem, solve_assignment


@dataclass(frozen=True)
class OakPolicy(PolicyBase):
    """Composite-utility policy; its ablations switch off K or r or swap in the aggregate factor.

    Optimises Σ_ij x_ij·U_ij + μ_na·(#unallocated) exactly each round (DP or HiGHS, same optimum).
    """

    params: UtilityParams = UtilityParams()
    solver: str = "auto"
    name: str = "oak-paper"

    @property
    def reads_clock(self) -> bool:
        """Whether a decision may depend on the clock (see ``Policy``): the age key reads ``t_queue_s`` and the
        aggregate restart factor ``age_s``. Without both, ``decide`` reads only clock-free fields (goodput, valid,
        t_progress_s, t_ckpt_s, restart_penalty_s and the capacity arrays; never ``current`` or ``policy_state``)
        and the solvers are deterministic, with no time limit."""
        return self.params.age_key or self.params.restart_factor in (RestartFactor.AGGREGATE, RestartFactor.SIA)

    @classmethod
    def with_params(cls, name: str = "oak-paper", solver: str = "auto", **kwargs: Any) -> OakPolicy:
        return cls(params=utility_params("OAK", **kwargs), solver=solver, name=name)

    def decide(self, snap: RoundSnapshot) -> Allocation:
        u = utility_matrix(snap, self.params)
        mu = self.params.mu_na
        problem = AssignmentProblem(
            value=(value := u - mu),
            valid=snap.valid,
            gpus=snap.config_gpus,
            gpu_type=snap.config_type,
            capacity=snap.capacity,
            forced=forced_configs(snap),
            prefer=preferred_configs(snap),
            warm_prices=snap.solver_prices,
        )
        res = solve_assignment(problem, self.solver)
        objective = mu * snap.num_jobs + res.objective
        # bound: the solver's upper bound on the optimum, in this objective's units; gap: its certified relative gap
        info = {
            "solve_ms": res.wall_ms,
            "bound": mu * snap.num_jobs + res.bound,
            "gap": res.gap,
            "warm": float(res.warm),
        }
        return Allocation(
            config=res.choice, objective=objective, method=res.method, info=info, values=value, prices=res.prices
        )
