"""One round of the engine: ``step(model, ledger, now, policy) -> Plan``.

The policy sees an immutable snapshot and returns an allocation; the engine validates and places it with
the cluster model and returns, per active job, an intent — what a backend must do to make the allocation
true (Ray autoscaler v2's ``schedule(request) -> reply``). The backend (the simulator, the local or Ray
runtime) enacts the intents and updates the ledger; the engine never acts.

| intent | the job | the backend |
|---|---|---|
| ``KEEP`` | keeps what it holds (or keeps waiting) | nothing |
| ``START`` | held nothing, gets a shape on GPUs | start it (it restores from its checkpoint) |
| ``STOP`` | held GPUs, gets none | stop it (checkpoint, release) |
| ``RESTART`` | held GPUs, gets another shape or other GPUs | stop it, start it on the new GPUs |
| ``RELOCATE`` | gets other GPUs of the same per-node shape, under ``restart_on="shape"`` | move it without a restart (the Sia artifact's rule) |
"""

from __future__ import annotations

import enum
import time
import traceback
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from oak.engine.ledger import JobsState
from oak.engine.model import ClusterModel
from oak.errors import PolicyError
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.placement.placer import GpuSet
from oak.policies.base import Policy


class Intent(enum.Enum):
    KEEP = "keep"
    START = "start"
    STOP = "stop"
    RESTART = "restart"
    RELOCATE = "relocate"


class JobIntent(NamedTuple):
    """What job ``job`` (its index in the ledger) must do: its new shape (−1: none), configuration and GPUs. A named
    tuple: one is made per active job each round (a frozen dataclass cost ~3 % of a 1,000-job simulation)."""

    job: int
    intent: Intent
    shape: int
    config: int
    gpus: GpuSet


@dataclass(frozen=True)
class Plan:
    """The reply of one round: the snapshot the policy saw, its allocation, the decision time and the intents
    of the active jobs (in the snapshot's order)."""

    snapshot: RoundSnapshot
    allocation: Allocation
    placed: list[GpuSet]
    decision_ms: float
    intents: tuple[JobIntent, ...]


def decide(policy: Policy, snap: RoundSnapshot) -> Allocation:
    """``policy.decide(snap)``, checked: a result that is not an :class:`Allocation` is a :class:`PolicyError`, and
    so is an exception raised by a user's policy (code outside the ``oak`` package: ``--policy FILE.py:NAME`` or
    ``MODULE:NAME``), with the round's time and where in the user's code it was raised. An exception of OAK's
    own policies is OAK's bug and propagates as it is."""
    try:
        alloc = policy.decide(snap)
    except (Exception, SystemExit) as exc:  # a user's sys.exit() in decide too; Ctrl-C stays Ctrl-C
        if type(policy).__module__.partition(".")[0] == "oak":
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" ({frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name})" if frames else ""
        raised = f"{type(exc).__name__}: {exc}{where}"
        raise PolicyError(
            f"policy {policy.name!r} failed at t = {snap.time_s:,.0f} s: {raised}", what=f"raised {raised}"
        ) from exc
    if not isinstance(alloc, Allocation):
        raise PolicyError(
            f"policy {policy.name!r} returned {type(alloc).__name__} at t = {snap.time_s:,.0f} s; expected an "
            "oak.Allocation (docs/policies.md)",
            what=f"returned {type(alloc).__name__}, not an oak.Allocation",
        )
    return alloc


def step(model: ClusterModel, st: JobsState, now: float, active: np.ndarray, policy: Policy) -> Plan:
    """Decide the round at ``now`` for the ``active`` jobs of the ledger ``st`` (read only)."""
    snap = model.snapshot(st, now, active, policy.needs_node_goodput)
    start = time.perf_counter()
    alloc = decide(policy, snap)
    ms = (time.perf_counter() - start) * 1e3
    shapes, placed = model.plan(snap, alloc, policy.name, st, active, policy.avoids_failing_nodes)
    relocate = model.physics.restart_on == "shape"
    intents: list[JobIntent] = []
    new_shapes = np.asarray(shapes).tolist()
    configs = model.shape_config[np.maximum(shapes, 0)].tolist()
    held = st.shape[active].tolist()
    holding = st.gpus
    # tuple.__new__ skips the named tuple's Python-level constructor: one intent per active job every round
    make = tuple.__new__
    keep, stop, begin, restart = Intent.KEEP, Intent.STOP, Intent.START, Intent.RESTART
    for i, new, gpus, had, config in zip(active.tolist(), new_shapes, placed, held, configs, strict=True):
        if new < 0:
            intents.append(make(JobIntent, (i, stop if had >= 0 else keep, -1, -1, ())))
            continue
        if new == had and gpus == holding[i]:
            kind = keep
        elif had < 0:
            kind = begin
        elif relocate and model._per_node(holding[i]) == model._per_node(gpus):
            kind = Intent.RELOCATE
        else:
            kind = restart
        intents.append(make(JobIntent, (i, kind, new, config, gpus)))
    return Plan(snap, alloc, placed, ms, tuple(intents))
