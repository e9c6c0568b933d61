"""Trace-driven cluster simulator with paired failure injection."""

from oak.sim.metrics import JobResult, RunResult
from oak.sim.physics import PhysicsOptions
from oak.sim.simulator import Simulator, simulate

__all__ = ["JobResult", "PhysicsOptions", "RunResult", "Simulator", "simulate"]
