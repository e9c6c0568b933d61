"""The Sia artifact's "Gavel" (``gavel-throughput``, issue [sia-fidelity] item 2): the sum of normalised
throughputs at rigid GPU counts, re-decided every 360 s."""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import make_policy
from oak.policies.gavel_throughput import GavelRound, GavelThroughputPolicy
from oak.sim import Simulator
from oak.workloads import load_workload


def _rounds(workload: str = "medium") -> list[tuple[RoundSnapshot, Allocation, list]]:
    seen: list[tuple[RoundSnapshot, Allocation, list]] = []
    Simulator(load_workload(workload)).run(
        make_policy("gavel-throughput"), 0.0, 0, on_round=lambda s, a, p: seen.append((s, a, p))
    )
    return seen


def test_rigid_at_the_demand_and_decided_on_360_s_boundaries_only() -> None:
    seen = _rounds()
    decided = [s.time_s for s, a, _ in seen if a.method != "gavel-round-kept"]
    assert decided and all(abs(t / 360.0 - round(t / 360.0)) < 1e-9 or t == decided[0] for t in decided[1:])
    for snap, alloc, placed in seen:
        for i in np.flatnonzero(alloc.config >= 0).tolist():
            assert snap.config_gpus[alloc.config[i]] <= snap.requested_gpus[i]
            assert len(placed[i]) == snap.config_gpus[alloc.config[i]]
        if alloc.method == "gavel-round-kept":  # between boundaries nothing new starts
            assert isinstance(alloc.state, GavelRound) and snap.time_s < alloc.state.next_s
            newcomers = (snap.current < 0) & (alloc.config >= 0)
            assert not newcomers.any()


def test_it_maximises_the_summed_normalised_throughput() -> None:
    """On each decided round no single job's move to another type's rigid configuration, nor admitting a
    waiting job where GPUs are free, raises the objective: the exact optimum checked by local moves."""
    policy = GavelThroughputPolicy()
    for snap, alloc, _ in _rounds()[:200]:
        if alloc.method == "gavel-round-kept":
            continue
        values = policy.values(snap)
        assert alloc.values is not None and np.array_equal(alloc.values, values)
        finite = np.isfinite(values)
        assert np.allclose(np.where(finite, values, 0).sum(axis=1)[finite.any(axis=1)], 1.0)  # shares sum to 1
        used = np.zeros(len(snap.capacity), dtype=np.int64)
        got = alloc.config
        np.add.at(used, snap.config_type[got[got >= 0]], snap.config_gpus[got[got >= 0]])
        free = snap.capacity - used
        for i in np.flatnonzero(got < 0).tolist():
            fits = finite[i] & (snap.config_gpus <= free[snap.config_type])
            assert not fits.any() or snap.kept is not None, (snap.time_s, i)
