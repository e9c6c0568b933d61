"""The backend-neutral round engine: a cluster model, a job ledger with explicit phases, and
``step(model, ledger, now, active, policy) -> Plan``. The simulator (:mod:`oak.sim`) and the runtime backends
(:mod:`oak.runtime`: local processes, Ray) are drivers that enact plans; see docs/architecture.md."""

from oak.engine.ledger import JobsState, Phase
from oak.engine.metrics import JobResult, RunResult
from oak.engine.model import ClusterModel
from oak.engine.rules import PhysicsOptions
from oak.engine.step import Intent, JobIntent, Plan, step

__all__ = [
    "ClusterModel",
    "Intent",
    "JobIntent",
    "JobResult",
    "JobsState",
    "Phase",
    "PhysicsOptions",
    "Plan",
    "RunResult",
    "step",
]
