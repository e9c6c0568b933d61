"""Scheduling policies: pure functions from a RoundSnapshot to an Allocation."""

from oak.policies.base import POLICY_DESCRIPTIONS, Policy, make_policy, policy_names
from oak.policies.oak import OakPolicy
from oak.policies.sia import SiaPolicy

__all__ = ["POLICY_DESCRIPTIONS", "OakPolicy", "Policy", "SiaPolicy", "make_policy", "policy_names"]
