"""The immutable round snapshot handed to policies, and the allocation they return.

Arrays are indexed by job (J active jobs, in a stable order) and by configuration (C configurations of the
cluster). Policies are pure functions ``RoundSnapshot -> Allocation``; the simulator and the real runtime
build the same snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from oak.model.config import Configuration

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def frozen_array(a: npt.ArrayLike, dtype: Any) -> Any:
    """A read-only copy of ``a``."""
    out = np.array(a, dtype=dtype)
    out.setflags(write=False)
    return out


def sealed(a: npt.NDArray[Any], dtype: Any) -> Any:
    """``a`` itself made read-only (converted only where its dtype differs): for an array just computed that nothing
    else holds — a fancy-indexed gather, an arithmetic result — where ``frozen_array`` would copy it again."""
    out = np.asarray(a, dtype=dtype)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class RoundSnapshot:
    """Everything a policy may look at in one scheduling round.

    goodput: (J, C) Sia-normalised goodput G_ij (row minimum over valid configurations = 1); 0 where invalid.
    valid: (J, C) whether configuration j is allowed for job i (GPU bounds, profile, batch limits).
    t_progress_s / t_ckpt_s / t_queue_s: measured productive, checkpoint-restore and waiting time (s).
    age_s: now − submission (s). restarts: restore events after the first start. current: configuration index
    held now (−1: none). restoring: the job is inside a restore delay. restart_penalty_s: P_restart per job (s).
    attained_gpu_s: GPU-seconds received so far.
    failure_restarts: how many restarts the world adds to ``restarts`` for each failure (the simulator's
    ``PhysicsOptions.failure_restarts``; 1 in every runtime), so that a policy can tell moves from failures.
    min_gpus / max_gpus / requested_gpus: (J,) the job's GPU bounds and demand.
    progress_rate: (J, C) progress in base-batch iterations per second in each configuration (0 where invalid);
    remaining_work / total_work: (J,) base-batch iterations left / in all (estimates a real runtime also has).
    node_type / node_gpus: (K,) GPU type index and GPU count of each node. current_replicas: (J, K) GPUs held
    per node now. node_goodput: (J, T, N+1, R+1) raw goodput (samples/s) of each job on N nodes and R GPUs of
    type T (0 where infeasible), filled only for policies that set ``needs_node_goodput``.
    policy_state: what this policy returned as ``Allocation.state`` in the previous round (None at first).
    kept: (J,) the configuration the world holds each job to this round whatever the policy decides (−1: free),
    or None when it holds none; set where restores cannot be preempted (``PhysicsOptions.restores_preemptible``),
    and honoured by the policies that solve the round program (``forced_configs``).
    failure_overhead: (J, C) the share of job i's running time that failures and checkpoints cost in configuration
    j — checkpoint writes C/τ plus, per failure (rate ρ_ij: more GPUs and nodes fail more often), its restore and
    the half interval of work it loses — where the world models periodic checkpoints; None otherwise.
    tie_config: (J,) the configuration a job without GPUs takes when its best options are equal in value (−1:
    none), or None: the world's tie rule (``PhysicsOptions.first_type_tie``), honoured by the round programs
    (``preferred_configs``) as they keep a job where it is on a tie.
    solver_prices: (T,) the per-GPU-type prices of the previous round's program (``Allocation.prices``), None at
    first: a policy hands them to ``AssignmentProblem.warm_prices`` to start the price search near the answer.
    work_known: (J,) whether a job's ``remaining_work`` and ``progress_rate`` rest on a declared or reported length
    and measured or profiled speed, or are placeholders (a runtime's command job before it reports its total
    and step times); None: every job's do.
    """

    time_s: float
    configs: tuple[Configuration, ...]
    gpu_types: tuple[str, ...]
    config_type: IntArray
    config_gpus: IntArray
    capacity: IntArray
    job_names: tuple[str, ...]
    applications: tuple[str, ...]
    goodput: FloatArray
    valid: BoolArray
    t_progress_s: FloatArray
    t_ckpt_s: FloatArray
    t_queue_s: FloatArray
    age_s: FloatArray
    restarts: IntArray
    failures: IntArray
    current: IntArray
    restoring: BoolArray
    restart_penalty_s: FloatArray
    attained_gpu_s: FloatArray
    min_gpus: IntArray
    max_gpus: IntArray
    requested_gpus: IntArray
    progress_rate: FloatArray
    remaining_work: FloatArray
    total_work: FloatArray
    node_type: IntArray
    node_gpus: IntArray
    current_replicas: IntArray
    node_goodput: FloatArray | None = None
    policy_state: Any = None
    kept: IntArray | None = None
    failure_overhead: FloatArray | None = None
    tie_config: IntArray | None = None
    solver_prices: FloatArray | None = None
    work_known: BoolArray | None = None
    failure_restarts: int = 1

    @property
    def num_jobs(self) -> int:
        return len(self.job_names)

    @property
    def num_configs(self) -> int:
        return len(self.configs)


@dataclass(frozen=True, eq=False)
class Allocation:
    """A policy's decision: ``config[i]`` is the configuration index for job i, or −1 for none.

    ``replicas``: optionally (J, K) GPUs per node for policies that place jobs themselves (Pollux); when given,
    it is the decision and ``config`` is ignored by the simulator. ``objective``: the optimiser's objective
    value; ``method``: which solver produced it; ``state``: handed back as the next round's
    ``RoundSnapshot.policy_state`` (e.g. a genetic algorithm's population, for warm starts). ``values``:
    optionally (J, C) what each (job, configuration) was worth to the policy this round (higher is better;
    only entries that are ``valid`` and finite were offered: −inf marks others a policy does not offer), in the
    units ``value_label`` names — the engine's reasons (``oak.engine.reasons``)
    explain the decision with them. ``prices``: optionally (T,) the per-GPU-type prices of the round's program
    (``AssignmentResult.prices``), handed to the next round as ``RoundSnapshot.solver_prices`` (a warm start).
    """

    config: IntArray
    objective: float = float("nan")
    method: str = ""
    info: dict[str, float] = field(default_factory=dict)
    replicas: IntArray | None = None
    state: Any = None
    values: FloatArray | None = None
    value_label: str = "value"
    prices: FloatArray | None = None

    def gpus_per_type(self, snap: RoundSnapshot) -> IntArray:
        """GPUs used per GPU type."""
        used = np.zeros(len(snap.gpu_types), dtype=np.int64)
        chosen = self.config[self.config >= 0]
        np.add.at(used, snap.config_type[chosen], snap.config_gpus[chosen])
        return used


def kept_current(snap: RoundSnapshot, which: BoolArray) -> IntArray:
    """(J,) the current configuration of each job in ``which`` that holds one still valid, −1 for the others."""
    keep = np.where(which & (snap.current >= 0), snap.current, -1)
    still_valid = snap.valid[np.arange(snap.num_jobs), np.maximum(keep, 0)]
    return np.where((keep >= 0) & still_valid, keep, -1).astype(np.int64)


def kept_while_restoring(snap: RoundSnapshot) -> IntArray:
    """(J,) the configuration each job inside its restore delay keeps (its current one, when still valid), −1 for
    the others: the ``forced`` argument of policies that let restores finish (Sia; ``oak`` with ``keep_restoring``)."""
    return kept_current(snap, snap.restoring)


def forced_configs(snap: RoundSnapshot, *others: IntArray | None) -> IntArray | None:
    """(J,) the configurations a round program must keep: the world's (``snap.kept``) and any the policy adds
    (each −1 where free; the first that names one wins), or None when none is forced."""
    out = np.full(snap.num_jobs, -1, dtype=np.int64)
    for f in (snap.kept, *others):
        if f is not None:
            out = np.where(out >= 0, out, f)
    return out if np.any(out >= 0) else None


def preferred_configs(snap: RoundSnapshot) -> IntArray:
    """(J,) the configuration a round program keeps each job on when the values tie: its current one, else the
    world's tie rule's (``tie_config``), else −1."""
    current = np.asarray(snap.current, dtype=np.int64)
    if snap.tie_config is None:
        return current
    return np.where(current >= 0, current, snap.tie_config).astype(np.int64)
