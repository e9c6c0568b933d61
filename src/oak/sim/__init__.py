"""Trace-driven cluster simulator with paired failure injection."""

from oak.engine.metrics import JobResult, RunResult
from oak.engine.rules import PhysicsOptions
from oak.sim.simulator import Simulator, simulate

__all__ = ["JobResult", "PhysicsOptions", "RunResult", "Simulator", "simulate"]
