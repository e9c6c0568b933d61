"""Job specifications (what a user submits)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from oak.errors import OakInputError


@dataclass(frozen=True)
class JobSpec:
    """A training job as submitted.

    ``submit_time_s``: seconds since the start of the workload. ``min_gpus``/``max_gpus``: bounds on the GPU
    count of any configuration the job may get. ``restart_penalty_s``: P_restart (seconds) used by the
    restart factor; ``None`` means the application's default (paper §IV-D, 30 s fallback).
    ``batch_size``: the global batch the user asked for (informational; the simulator tunes it per allocation).
    ``gpus``: the GPU count the user asked for (paper §IV-B "GPU demand"); rigid policies (Gavel) run the job at
    exactly this count and DRF caps its share there. ``None`` means ``max_gpus``.
    ``replicas_from_trace``: ``max_gpus`` is a Sia trace's ``num_replicas`` — a demand, which the Sia artifact's
    simulator holds only rigid jobs to (``PhysicsOptions.replicas_cap``).
    """

    name: str
    application: str
    submit_time_s: float
    min_gpus: int = 1
    max_gpus: int = 64
    restart_penalty_s: float | None = None
    batch_size: int | None = None
    gpus: int | None = None
    replicas_from_trace: bool = False

    @property
    def requested_gpus(self) -> int:
        """The GPU demand: ``gpus`` if given, else ``max_gpus``."""
        return self.gpus if self.gpus is not None else self.max_gpus

    def __post_init__(self) -> None:
        where = f"job {self.name!r}"
        if not self.name:
            raise OakInputError("job: empty name; expected a non-empty string")
        if not math.isfinite(self.submit_time_s) or self.submit_time_s < 0:
            raise OakInputError(f"{where}: submit time {self.submit_time_s!r}; expected a finite number >= 0 (s)")
        if self.min_gpus < 1:
            raise OakInputError(f"{where}: min_gpus={self.min_gpus}; expected an integer >= 1")
        if self.max_gpus < self.min_gpus:
            raise OakInputError(f"{where}: max_gpus={self.max_gpus} < min_gpus={self.min_gpus}")
        if self.restart_penalty_s is not None and (
            not math.isfinite(self.restart_penalty_s) or self.restart_penalty_s < 0
        ):
            raise OakInputError(
                f"{where}: restart_penalty_s={self.restart_penalty_s!r}; expected a finite number >= 0 (s)"
            )
        if self.gpus is not None and not self.min_gpus <= self.gpus <= self.max_gpus:
            raise OakInputError(
                f"{where}: gpus={self.gpus}; expected a demand within [min_gpus, max_gpus] = "
                f"[{self.min_gpus}, {self.max_gpus}]"
            )
        if self.batch_size is not None and self.batch_size < 1:
            raise OakInputError(f"{where}: batch_size={self.batch_size}; expected a positive integer")
