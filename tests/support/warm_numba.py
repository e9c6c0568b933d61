"""Compile the numba kernels (Pollux's and Hybrid OAK's NSGA-II) once, into numba's on-disk cache.

tests/conftest.py starts this in the background when pytest-xdist runs the suite, so that the workers load the
kernels from the cache instead of each compiling them (~10 s of CPU per kernel per worker on a fresh clone). Two
short simulations with tiny budgets reach every compiled function with the signatures the policies use; given a
policy's name (``pollux`` or ``hybrid-oak``) it compiles that policy's kernels only, so that the conftest can
compile both at once, in two processes."""

from __future__ import annotations

import sys

from oak.engine.rules import PhysicsOptions
from oak.sim.compare import RunSpec, run_one

if __name__ == "__main__":
    short = PhysicsOptions(horizon_s=4000.0)
    for policy in sys.argv[1:] or ("pollux", "hybrid-oak"):
        run_one(RunSpec(policy, "small", 0.1, 0, physics=short, policy_params=(("population", 4), ("generations", 2))))
