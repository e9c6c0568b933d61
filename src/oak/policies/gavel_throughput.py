"""The Sia artifact's "Gavel": Gavel's maximum-sum-throughput policy, rigid at each job's demand, in rounds of 360 s.

The artifact's simulator runs Gavel as ``max_sum_throughput_perf`` (its ``simulator_config.py``), not finish-time
fairness (our ``gavel``): every job at its demand (``num_replicas``, rounded down to one of Sia's
configurations: ``rigid_configs``), on the GPU type that maximises the cluster's summed throughput, each job's
throughput normalised by its sum over the GPU types it can run on (as Gavel's throughput-sum policy scales each
row of its throughput matrix). Each ``round_s`` (Gavel's 360 s) the program

    max Σ_ij x_ij · τ_ij / Σ_k τ_ik,   Σ_j x_ij ≤ 1,   GPUs per type ≤ capacity

is solved exactly over the jobs' rigid configurations (Gavel solves its LP for time fractions and rounds them
into a round's placement; the artifact's rigid jobs make that an integer program of the same objective).
Between two round boundaries the allocation stands: a job that arrives waits for the next boundary and GPUs a
finished job frees stay idle until then, as in Gavel's rounds; jobs the world holds on their configuration
(restores under ``--rules sia-artifact``) keep it, and a decision the cluster no longer fits (a node down)
drops its jobs last first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from oak.errors import OakInputError
from oak.model.snapshot import Allocation, IntArray, RoundSnapshot, forced_configs
from oak.policies.base import PolicyBase
from oak.policies.rigid import rigid_configs
from oak.solve import AssignmentProblem, solve_assignment

#: Gavel's round (s)
GAVEL_ROUND_S = 360.0


@dataclass(frozen=True)
class GavelRound:
    """The last round's decision: when the next round boundary falls (s) and each job's configuration by name."""

    next_s: float
    choice: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class GavelThroughputPolicy(PolicyBase):
    """Maximum summed normalised throughput at rigid GPU counts, re-decided every ``round_s`` seconds."""

    round_s: float = GAVEL_ROUND_S
    solver: str = "auto"
    name: str = "gavel-throughput"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.round_s) and self.round_s > 0):
            raise OakInputError(f"gavel-throughput: round_s={self.round_s!r}; expected a positive number of seconds")

    def values(self, snap: RoundSnapshot) -> np.ndarray:
        """(J, C) each job's normalised throughput τ_ij / Σ_k τ_ik at its rigid configuration of each type; −inf
        at every other configuration."""
        cfg, rate = rigid_configs(snap)
        total = rate.sum(axis=1, keepdims=True)
        share = np.where(total > 0, rate / np.where(total > 0, total, 1.0), 0.0)
        values = np.full(snap.goodput.shape, -np.inf)
        rows, types = np.nonzero((cfg >= 0) & (share > 0))
        values[rows, cfg[rows, types]] = share[rows, types]
        return values

    def decide(self, snap: RoundSnapshot) -> Allocation:
        values = self.values(snap)
        offered = np.isfinite(values)
        last = snap.policy_state if isinstance(snap.policy_state, GavelRound) else None
        if last is not None and snap.time_s < last.next_s - 1e-9:
            choice = self._kept(snap, last, offered)
            return Allocation(
                config=choice, method="gavel-round-kept", state=last, values=values, value_label="throughput share"
            )
        forced = forced_configs(snap)
        valid = offered.copy()
        if forced is not None:  # a configuration the world keeps is offered, whatever its type's share
            held = np.flatnonzero(forced >= 0)
            valid[held, forced[held]] = True
        problem = AssignmentProblem(
            value=np.where(offered, values, 0.0),
            valid=valid,
            gpus=snap.config_gpus,
            gpu_type=snap.config_type,
            capacity=snap.capacity,
            forced=forced,
            prefer=np.asarray(snap.current, dtype=np.int64),
            warm_prices=snap.solver_prices,
        )
        res = solve_assignment(problem, self.solver)
        boundary = (math.floor(snap.time_s / self.round_s + 1e-9) + 1) * self.round_s
        state = GavelRound(
            boundary,
            MappingProxyType({n: int(c) for n, c in zip(snap.job_names, res.choice.tolist(), strict=True) if c >= 0}),
        )
        info = {"solve_ms": res.wall_ms, "bound": res.bound, "gap": res.gap, "warm": float(res.warm)}
        return Allocation(
            config=res.choice,
            objective=res.objective,
            method=res.method,
            info=info,
            state=state,
            values=values,
            value_label="throughput share",
            prices=res.prices,
        )

    @staticmethod
    def _kept(snap: RoundSnapshot, last: GavelRound, offered: np.ndarray) -> IntArray:
        """The last round's configurations of the jobs still here (those the world keeps first), dropped last
        first where the cluster no longer fits them."""
        choice = np.array([last.choice.get(n, -1) for n in snap.job_names], dtype=np.int64)
        ok = choice >= 0
        ok[ok] = snap.valid[np.flatnonzero(ok), choice[ok]]
        choice = np.where(ok, choice, -1)
        forced = forced_configs(snap)
        if forced is not None:
            choice = np.where(forced >= 0, forced, choice)
        free = snap.capacity.astype(np.int64).copy()
        first = np.flatnonzero(forced >= 0).tolist() if forced is not None else []
        pinned = set(first)
        order = first + [i for i in range(snap.num_jobs) if choice[i] >= 0 and i not in pinned]
        for i in order:
            t, g = int(snap.config_type[choice[i]]), int(snap.config_gpus[choice[i]])
            if g <= free[t]:
                free[t] -= g
            else:
                choice[i] = -1
        return choice
