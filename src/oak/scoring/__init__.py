"""OAK's composite utility U = (G·r)^p · K (paper §III-B/C), free of I/O and of the simulator."""

from oak.scoring.utility import (
    RestartFactor,
    UtilityParams,
    age_key,
    composite_utility,
    restart_factor_aggregate,
    restart_factor_decomposed,
    utility_matrix,
    utility_params,
)

__all__ = [
    "RestartFactor",
    "UtilityParams",
    "age_key",
    "composite_utility",
    "restart_factor_aggregate",
    "restart_factor_decomposed",
    "utility_matrix",
    "utility_params",
]
