"""Compile the numba kernels (Pollux's and Hybrid OAK's NSGA-II; the solver's grid, hull, local-search and core
loops) once, into numba's on-disk cache.

tests/conftest.py starts this in the background when pytest-xdist runs the suite, so that the workers load the
kernels from the cache instead of each compiling them (~10 s of CPU per kernel per worker on a fresh clone). Two
short simulations with tiny budgets reach every compiled function with the signatures the policies use; given a
policy's name (``pollux`` or ``hybrid-oak``) it compiles that policy's kernels only, so that the conftest can
compile them at once, in separate processes; ``solver`` compiles the round solver's (one large random round)."""

from __future__ import annotations

import sys

from oak.engine.rules import PhysicsOptions
from oak.sim.compare import RunSpec, run_one

if __name__ == "__main__":
    short = PhysicsOptions(horizon_s=4000.0)
    for policy in sys.argv[1:] or ("pollux", "hybrid-oak", "solver"):
        if policy == "solver":
            import numpy as np

            from oak.solve import solve_assignment
            from oak.solve.assignment import snapped
            from oak.solve.core import solve_core
            from oak.solve.instances import random_instance
            from oak.solve.lagrangian import build_hulls, solve_lagrangian

            problem = snapped(random_instance(np.random.default_rng(0), 1024, 3, 300))
            build_hulls(problem, engine="numba")
            res = solve_lagrangian(problem, polish=False)
            solve_core(problem, res.prices, res.bound, res.choice, engine="numba")
            solve_assignment(problem)
            continue
        run_one(RunSpec(policy, "small", 0.1, 0, physics=short, policy_params=(("population", 4), ("generations", 2))))
