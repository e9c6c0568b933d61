"""The policy interface and the registry of named policies."""

from __future__ import annotations

from typing import Any, Protocol

from oak.errors import OakInputError
from oak.model.snapshot import Allocation, RoundSnapshot


class Policy(Protocol):
    """A scheduling policy: ``decide`` is a pure function of the snapshot.

    Optional attributes, read with ``getattr`` (a policy without them gets the default):

    * ``needs_node_goodput`` (default False): fill ``RoundSnapshot.node_goodput``.
    * ``reads_clock`` (default True): False declares that ``decide`` is deterministic and reads none of the
      snapshot's clock fields (``time_s``, ``age_s``, ``t_queue_s``), so two snapshots equal in every other field
      get the same allocation. The simulator then skips the rounds of an idle stretch (no job holds GPUs, no
      arrival) whose decision is provably the one just taken; see :func:`reads_clock`.
    """

    @property
    def name(self) -> str: ...

    def decide(self, snap: RoundSnapshot) -> Allocation: ...


def reads_clock(policy: object) -> bool:
    """Whether ``policy``'s decisions may depend on the clock: its ``reads_clock`` attribute, True when missing
    (only a policy that declares otherwise is trusted to ignore ``time_s``, ``age_s`` and ``t_queue_s``)."""
    return bool(getattr(policy, "reads_clock", True))


def needs_node_goodput(policy: object) -> bool:
    """Whether ``policy`` reads ``RoundSnapshot.node_goodput`` (its ``needs_node_goodput``, False when missing)."""
    return bool(getattr(policy, "needs_node_goodput", False))


POLICY_DESCRIPTIONS: dict[str, str] = {
    "oak": "OAK as shipped: (G·m)^p − θ, measured restart and switching cost only on moves, restores kept, exact MILP",
    "oak-paper": "OAK read literally (paper §III): U = (G·r)^p·K + μ_na·#unallocated, r on every configuration",
    "goodput": "the paper's 'Sia' cell (a): OAK's MILP with r = 1 and K = 1 (goodput only, p = 0.5)",
    "oak-no-age": "ablation (c) of oak-paper: without the age key (K = 1)",
    "oak-no-restart": "ablation (b) of oak-paper: without the restart factor (r = 1)",
    "oak-sia-factor": "ablation (b) read with Sia's factor: oak-paper with Sia's reallocation factor on moves, not r",
    "oak-aggregate": "§V-D: oak-paper with the aggregate factor max(A − n·P, 0)/(A + P) instead of the decomposed one",
    "sia": "faithful Sia (reference §5): p = −0.5, λ_n = 1.1, realloc factor on changed configurations",
    "sia-paper": "the paper's 'Sia' as the Sia artifact runs it: Sia's policy at p = +0.5, λ_n = −1.1 (a penalty)",
    "pollux": "Pollux (reference §4): NSGA-II over replicas per (job, node), power mean (p = −1) of fair-share speedups",
    "hybrid-oak": "Hybrid OAK (paper §V-E): OAK's objective optimised by NSGA-II (population 20 × 20 generations)",
    "gavel": "Gavel finish-time fairness (reference §6): min max finish-time ratio at rigid GPU counts",
    "drf": "DRF (reference §8): max-min fair GPU counts up to each job's demand, no throughput model",
}


def policy_names() -> tuple[str, ...]:
    return tuple(POLICY_DESCRIPTIONS)


def make_policy(name: str, **overrides: Any) -> Policy:
    """Build a named policy; ``overrides`` go to its parameters (e.g. ``p=0.25``, ``solver='highs'``)."""
    from oak.policies.oak import OakPolicy
    from oak.policies.sia import SiaPolicy
    from oak.scoring import RestartFactor

    if name in ("pollux", "hybrid-oak", "gavel", "drf"):
        overrides = {k: v for k, v in overrides.items() if k != "solver"}  # no round MILP to choose a solver for
    if name not in ("pollux", "hybrid-oak"):
        overrides = {k: v for k, v in overrides.items() if k != "seed"}  # deterministic policies take no seed
    if name == "sia":
        return SiaPolicy(**overrides)
    if name == "sia-paper":
        return SiaPolicy(**{"p": 0.5, "lambda_n": -1.1, "name": "sia-paper", **overrides})
    if name == "oak":
        from oak.policies.restart_aware import RestartAwareOakPolicy

        return RestartAwareOakPolicy(**overrides)
    if name == "pollux":
        from oak.policies.pollux import PolluxPolicy

        return PolluxPolicy(**overrides)
    if name == "hybrid-oak":
        from oak.policies.hybrid import HybridOakPolicy

        return HybridOakPolicy.with_params(**overrides)
    if name == "gavel":
        from oak.policies.gavel import GavelPolicy

        return GavelPolicy(**overrides)
    if name == "drf":
        from oak.policies.drf import DrfPolicy

        return DrfPolicy(**overrides)
    presets: dict[str, dict[str, Any]] = {
        "oak-paper": {},
        "goodput": {"age_key": False, "restart_factor": RestartFactor.OFF},
        "oak-no-age": {"age_key": False},
        "oak-no-restart": {"restart_factor": RestartFactor.OFF},
        "oak-aggregate": {"restart_factor": RestartFactor.AGGREGATE},
        "oak-sia-factor": {"restart_factor": RestartFactor.SIA},
    }
    if name not in presets:
        raise OakInputError(f"policy {name!r} is unknown; expected one of {', '.join(policy_names())}")
    return OakPolicy.with_params(name=name, **{**presets[name], **overrides})
