"""A policy written outside the package: shortest remaining time first, aged (docs/policies.md).

Each round, giving job i configuration c is worth

    K_i / (1 + T_ic / 3600),   T_ic = remaining_work_i / progress_rate_ic   (seconds left on c)

with K_i = min(exp(α·T_queue_i), K_max) OAK's age key, so short jobs go first and a job that has waited long
catches up. OAK's exact round solver picks at most one configuration per job within every GPU type's
capacity. Compare it with the baselines on the same paired runs:

    oak compare --workload medium --policies oak,sia,pollux,examples/my_policy.py:ShortestRemainingFirst --seeds 3
"""

from __future__ import annotations

import numpy as np

from oak import Allocation, AssignmentProblem, PolicyBase, RoundSnapshot, age_key, forced_configs, solve_assignment


class ShortestRemainingFirst(PolicyBase):
    """Shortest remaining time first with OAK's age key, solved exactly each round."""

    def __init__(self, alpha: float = 0.01, k_max: float = 100.0, solver: str = "auto") -> None:
        self.alpha, self.k_max, self.solver = alpha, k_max, solver

    @property
    def name(self) -> str:
        return "srtf"

    # reads_clock stays True (PolicyBase): the age key reads t_queue_s.

    def decide(self, snap: RoundSnapshot) -> Allocation:
        k = age_key(snap.t_queue_s, self.alpha, self.k_max)  # (J,)
        usable = snap.valid & (snap.progress_rate > 0)  # (J, C)
        seconds_left = np.divide(
            snap.remaining_work[:, None], snap.progress_rate, out=np.full(usable.shape, np.inf), where=usable
        )
        value = np.where(usable, k[:, None] / (1.0 + seconds_left / 3600.0), 0.0)
        problem = AssignmentProblem(
            value=value,
            valid=usable,
            gpus=snap.config_gpus,
            gpu_type=snap.config_type,
            capacity=snap.capacity,
            forced=forced_configs(snap),  # configurations the world holds this round (e.g. restores)
        )
        result = solve_assignment(problem, self.solver)
        return Allocation(config=result.choice, objective=result.objective, method=result.method)
