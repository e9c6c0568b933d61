"""The policy interface and the registry of named policies."""

from __future__ import annotations

from typing import Any, Protocol

from oak.errors import OakInputError
from oak.model.snapshot import Allocation, RoundSnapshot


class Policy(Protocol):
    """A scheduling policy: ``decide`` is a pure function of the snapshot."""

    @property
    def name(self) -> str: ...

    def decide(self, snap: RoundSnapshot) -> Allocation: ...


POLICY_DESCRIPTIONS: dict[str, str] = {
    "oak": "OAK: U = (G·r)^p·K with decomposed restart factor and age key, exact per-round MILP",
    "goodput": "the paper's 'Sia' cell (a): OAK's MILP with r = 1 and K = 1 (goodput only, p = 0.5)",
    "oak-no-age": "ablation (c): OAK without the age key (K = 1)",
    "oak-no-restart": "ablation (b): OAK without the restart factor (r = 1)",
    "oak-aggregate": "§V-D: OAK with the aggregate factor max(A − n·P, 0)/(A + P) instead of the decomposed one",
    "sia": "faithful Sia (reference §5): p = −0.5, λ_n = 1.1, realloc factor on changed configurations",
}


def policy_names() -> tuple[str, ...]:
    return tuple(POLICY_DESCRIPTIONS)


def make_policy(name: str, **overrides: Any) -> Policy:
    """Build a named policy; ``overrides`` go to its parameters (e.g. ``p=0.25``, ``solver='highs'``)."""
    from oak.policies.oak import OakPolicy
    from oak.policies.sia import SiaPolicy
    from oak.scoring import RestartFactor

    if name == "sia":
        return SiaPolicy(**overrides)
    presets: dict[str, dict[str, Any]] = {
        "oak": {},
        "goodput": {"age_key": False, "restart_factor": RestartFactor.OFF},
        "oak-no-age": {"age_key": False},
        "oak-no-restart": {"restart_factor": RestartFactor.OFF},
        "oak-aggregate": {"restart_factor": RestartFactor.AGGREGATE},
    }
    if name not in presets:
        raise OakInputError(f"policy {name!r} is unknown; expected one of {', '.join(policy_names())}")
    return OakPolicy.with_params(name=name, **{**presets[name], **overrides})
