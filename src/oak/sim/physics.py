"""Simulator physics options. Every assumption where the paper is silent or inconsistent is an explicit
option here, documented in docs/model.md with its default."""

from __future__ import annotations

import math
from dataclasses import dataclass

from oak.errors import OakInputError
from oak.workloads.loader import MAX_PENALTY_S, MAX_TIME_S

RESTORE_COSTS = ("per-app",)
FAILURE_SCOPES = ("job", "gpu")
LOST_WORK = ("none", "since-checkpoint")
QUEUE_CLOCKS = ("accumulated", "since-last-run")


@dataclass(frozen=True)
class PhysicsOptions:
    """How the simulated cluster behaves.

    round_s: scheduling period (s); rounds fall on a fixed grid k·round_s, plus immediate re-decisions.
    restore_cost: "per-app" (each (re)start or failure costs the job's P_restart, paper §IV-D) or a number
    of seconds as a string, e.g. "60" (paper §V-D). failure_scope: "job" (each allocated job fails in a round
    with probability λ) or "gpu" (each of its GPUs does: 1 − (1 − λ)^gpus). lost_work: "none" (a failure
    costs only the restore) or "since-checkpoint" (progress since the last periodic checkpoint, every
    checkpoint_interval_s of productive time, is lost too). queue_clock: "accumulated" (T_queue never resets)
    or "since-last-run" (T_queue resets when the job is allocated). arrival_jitter_s: each job's submission is
    delayed by a seeded uniform in [0, jitter). horizon_s: simulated time after which a run stops and the
    unfinished jobs are reported as such.
    """

    round_s: float = 60.0
    restore_cost: str = "per-app"
    failure_scope: str = "job"
    lost_work: str = "none"
    checkpoint_interval_s: float = 600.0
    queue_clock: str = "accumulated"
    arrival_jitter_s: float = 0.0
    horizon_s: float = 3.0e6

    def __post_init__(self) -> None:
        if not (math.isfinite(self.round_s) and 0 < self.round_s <= MAX_TIME_S):
            raise OakInputError(
                f"physics round_s={self.round_s!r}: expected a positive number of seconds <= {MAX_TIME_S:g}"
            )
        if self.restore_cost not in RESTORE_COSTS:
            try:
                value = float(self.restore_cost)
            except ValueError:
                value = -1.0
            if not (math.isfinite(value) and 0 <= value <= MAX_PENALTY_S):
                raise OakInputError(
                    f"physics restore_cost={self.restore_cost!r}: expected 'per-app' or a number of seconds in "
                    f"[0, {MAX_PENALTY_S:g}]"
                )
        for name, allowed in (
            ("failure_scope", FAILURE_SCOPES),
            ("lost_work", LOST_WORK),
            ("queue_clock", QUEUE_CLOCKS),
        ):
            if getattr(self, name) not in allowed:
                raise OakInputError(f"physics {name}={getattr(self, name)!r}: expected one of {allowed}")
        for name in ("checkpoint_interval_s", "horizon_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 < v <= MAX_TIME_S):
                raise OakInputError(f"physics {name}={v!r}: expected a positive number of seconds <= {MAX_TIME_S:g}")
        if not (math.isfinite(self.arrival_jitter_s) and 0 <= self.arrival_jitter_s <= MAX_TIME_S):
            raise OakInputError(
                f"physics arrival_jitter_s={self.arrival_jitter_s!r}: expected a number of seconds in [0, {MAX_TIME_S:g}]"
            )

    def restore_delay_s(self, restart_penalty_s: float) -> float:
        """Seconds a (re)start or failure costs a job whose P_restart is ``restart_penalty_s``."""
        if self.restore_cost == "per-app":
            return restart_penalty_s
        return float(self.restore_cost)
