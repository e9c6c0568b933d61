"""Scheduling policies: pure functions from a round snapshot to an allocation, and their registry."""

from oak.policies.base import Policy, PolicyBase
from oak.policies.oak import OakPolicy
from oak.policies.registry import (
    POLICY_DESCRIPTIONS,
    REGISTRY,
    PolicySpec,
    make_policy,
    policy_label,
    policy_names,
    policy_spec,
)
from oak.policies.sia import SiaPolicy

__all__ = [
    "POLICY_DESCRIPTIONS",
    "REGISTRY",
    "OakPolicy",
    "Policy",
    "PolicyBase",
    "PolicySpec",
    "SiaPolicy",
    "make_policy",
    "policy_label",
    "policy_names",
    "policy_spec",
]
