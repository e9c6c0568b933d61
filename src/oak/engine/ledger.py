"""The job ledger: every job's state in arrays, and its phase in the lifecycle.

One :class:`JobsState` per run, mutated only by the driver that enacts plans (the simulator advancing time
analytically, the runtime from measurements); the engine reads it to build snapshots and plans.

Lifecycle (``phases``):

| phase | meaning | how it is encoded |
|---|---|---|
| ``PENDING`` | not yet submitted | ``~arrived`` |
| ``WAITING`` | submitted, holds no GPUs | ``arrived & ~done & shape < 0`` |
| ``RESTORING`` | holds GPUs, restoring from its checkpoint (no progress) | ``shape >= 0 & restore_left > 0`` |
| ``RUNNING`` | holds GPUs and makes progress | ``shape >= 0 & restore_left == 0 & ~ghost`` |
| ``STALLED`` | failed but keeps its GPUs without progress (the Sia artifact's "ghost" failures) | ``shape >= 0 & ghost`` |
| ``DONE`` | reached its total work | ``done`` |

A runtime job that failed for good or was cancelled is ``done`` in the ledger for the engine's purposes (it is
never placed again); the runtime keeps the reason in its own record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from oak.placement.placer import GpuSet

if TYPE_CHECKING:
    from oak.engine.beliefs import Beliefs


class Phase(enum.IntEnum):
    PENDING = 0
    WAITING = 1
    RESTORING = 2
    RUNNING = 3
    STALLED = 4
    DONE = 5


@dataclass
class JobsState:
    """Mutable per-run state of every job in the workload (arrays of length N; seconds, GPUs, progress in
    base-batch iterations). The real runtime fills the same state from measurements to build its snapshots."""

    submit: np.ndarray
    arrived: np.ndarray
    done: np.ndarray
    finish: np.ndarray
    progress: np.ndarray
    epoch: np.ndarray
    config: np.ndarray
    shape: np.ndarray
    restore_left: np.ndarray
    rate: np.ndarray
    t_progress: np.ndarray
    t_ckpt: np.ndarray
    t_queue: np.ndarray
    restarts: np.ndarray
    failures: np.ndarray
    started: np.ndarray
    gpu_s: np.ndarray
    gpu_lost: np.ndarray
    ckpt_tprog: np.ndarray
    gpus: list[GpuSet]
    policy_state: object = None
    #: (T,) the previous round's per-GPU-type prices (``Allocation.prices``): the next round's warm start
    solver_prices: np.ndarray | None = None
    #: (N,) whether each job's remaining work and rates are measured or declared, not placeholders (a command
    #: job of unknown length, or one that has reported no step time yet); None: every job's are
    work_known: np.ndarray | None = None
    #: the most GPUs each job has run on (the exploration cap's reference); 0: never ran
    max_run_gpus: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: failed jobs that keep their GPUs without progress until their allocation changes (failure_mode "ghost")
    ghost: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: (K,) nodes out of service (a hardware failure under repair): no job may be placed on them
    node_down: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: (K,) hardware failures observed on each node so far (node health, as a real scheduler sees it)
    node_failures: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: jobs the world holds to their current allocation this round, whatever the policy decides (a runtime job
    #: asked to stop that has not exited yet: its devices are not free)
    pinned: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: seconds of running between two periodic checkpoints' starts (interval + write time; inf: none), per job
    ckpt_period: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: GPU-seconds each job spent writing periodic checkpoints
    gpu_ckpt: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: (N, C) the share of each job's running time failures and checkpoints cost in each configuration (the
    #: snapshot's ``failure_overhead``); None where the world models no periodic checkpoints
    failure_overhead: np.ndarray | None = None
    #: seconds of its run a failure costs each job (restore + half its checkpoint interval): the placement puts
    #: the jobs with the most GPU-seconds at risk on the healthiest nodes; empty where not modelled
    work_at_risk: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: GPU-seconds of each job's work lost to failures (the part of ``gpu_lost`` that is not restores)
    gpu_lost_work: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: what the scheduler believes of each job's throughput (goodput "learned"); None: the truth is known
    beliefs: Beliefs | None = None
    #: seconds of each job's ``restore_left`` spent waiting for a stopping job to release its GPUs (a world
    #: with stop latencies: ``oak replay``); queueing, not restoring. Empty where not modelled
    handover_left: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def initial(cls, submit: np.ndarray) -> JobsState:
        """Every job not yet arrived, never run; ``submit``: submission times (s)."""
        n = len(submit)
        z = np.zeros(n)
        return cls(
            submit=np.asarray(submit, dtype=np.float64),
            arrived=np.zeros(n, bool),
            done=np.zeros(n, bool),
            finish=np.full(n, np.nan),
            progress=z.copy(),
            epoch=np.zeros(n, np.int64),
            config=np.full(n, -1, np.int64),
            shape=np.full(n, -1, np.int64),
            restore_left=z.copy(),
            rate=z.copy(),
            t_progress=z.copy(),
            t_ckpt=z.copy(),
            t_queue=z.copy(),
            restarts=np.zeros(n, np.int64),
            failures=np.zeros(n, np.int64),
            started=np.zeros(n, bool),
            gpu_s=z.copy(),
            gpu_lost=z.copy(),
            ckpt_tprog=z.copy(),
            gpus=[() for _ in range(n)],
            max_run_gpus=np.zeros(n, np.int64),
            ghost=np.zeros(n, bool),
            pinned=np.zeros(n, bool),
        )

    def phases(self) -> np.ndarray:
        """Every job's :class:`Phase` (as int8 codes), from the ledger's arrays."""
        out = np.full(len(self.submit), Phase.PENDING, dtype=np.int8)
        alloc = self.shape >= 0
        out[self.arrived & ~alloc] = Phase.WAITING
        ghost = alloc & self.ghost
        out[alloc & ~ghost & (self.restore_left > 0)] = Phase.RESTORING
        out[alloc & ~ghost & (self.restore_left <= 0)] = Phase.RUNNING
        out[ghost] = Phase.STALLED
        out[self.done] = Phase.DONE
        return out
