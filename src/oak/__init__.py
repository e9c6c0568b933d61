"""OAK: restart- and age-aware scheduling of distributed deep-learning jobs on shared GPU clusters.

The public policy API (docs/policies.md) is importable from here; names load on first use, so that
``import oak`` (and the ``oak`` command) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from oak.version import __version__

#: public name → the module that defines it (stable names; the modules may move)
_PUBLIC = {
    "Policy": "oak.policies.base",
    "PolicyBase": "oak.policies.base",
    "RoundSnapshot": "oak.model.snapshot",
    "Allocation": "oak.model.snapshot",
    "forced_configs": "oak.model.snapshot",
    "kept_current": "oak.model.snapshot",
    "kept_while_restoring": "oak.model.snapshot",
    "UtilityParams": "oak.scoring",
    "RestartFactor": "oak.scoring",
    "age_key": "oak.scoring",
    "restart_factor_decomposed": "oak.scoring",
    "utility_matrix": "oak.scoring",
    "AssignmentProblem": "oak.solve",
    "AssignmentResult": "oak.solve",
    "solve_assignment": "oak.solve",
    "make_policy": "oak.policies.registry",
    "policy_names": "oak.policies.registry",
    "PolicySpec": "oak.policies.registry",
}

__all__ = [
    "Allocation",
    "AssignmentProblem",
    "AssignmentResult",
    "Policy",
    "PolicyBase",
    "PolicySpec",
    "RestartFactor",
    "RoundSnapshot",
    "UtilityParams",
    "__version__",
    "age_key",
    "forced_configs",
    "kept_current",
    "kept_while_restoring",
    "make_policy",
    "policy_names",
    "restart_factor_decomposed",
    "solve_assignment",
    "utility_matrix",
]

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads them
    from oak.model.snapshot import Allocation, RoundSnapshot, forced_configs, kept_current, kept_while_restoring
    from oak.policies.base import Policy, PolicyBase
    from oak.policies.registry import PolicySpec, make_policy, policy_names
    from oak.scoring import RestartFactor, UtilityParams, age_key, restart_factor_decomposed, utility_matrix
    from oak.solve import AssignmentProblem, AssignmentResult, solve_assignment


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'oak' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
