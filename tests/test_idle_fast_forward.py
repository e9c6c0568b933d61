"""Idle fast-forward: skipping the provably unchanged rounds of idle stretches gives bit-identical results."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import pytest

from oak.engine.metrics import RunResult
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import make_policy
from oak.policies.base import Policy, PolicyBase
from oak.sim import PhysicsOptions, Simulator
from oak.workloads import load_workload

#: Arrivals end near 10,000 s; oak-no-age starves jobs soon after, so this horizon holds long idle stretches
#: while the round-by-round runs stay short.
HORIZON_S = 100_000.0


def _key(res: RunResult) -> list[Any]:
    """Every per-job and per-run result, floats as hex (bit-exact; -0.0 ≠ 0.0)."""

    def h(x: float | None) -> str | None:
        return None if x is None else float(x).hex()

    rows: list[Any] = [
        (
            j.name,
            h(j.jct_s),
            j.restarts,
            j.failures,
            h(j.t_progress_s),
            h(j.t_ckpt_s),
            h(j.t_queue_s),
            h(j.gpu_s_used),
            h(j.gpu_s_lost),
        )
        for j in res.jobs
    ]
    rows.append((h(res.end_time_s), h(res.makespan_s)))
    return rows


def _pair(workload: str, physics: PhysicsOptions) -> tuple[Simulator, Simulator]:
    wl = load_workload(workload)
    return Simulator(wl, physics=physics), Simulator(wl, physics=physics, idle_fast_forward=False)


@pytest.mark.portable
@pytest.mark.parametrize("workload", ["medium", "congestion"])
def test_oak_no_age_fast_forward_is_bit_identical(workload: str) -> None:
    fast, slow = _pair(workload, PhysicsOptions(horizon_s=HORIZON_S))
    for lam in (0.05, 0.1):
        for seed in (0, 1):
            a = fast.run(make_policy("oak-no-age", seed=seed), lam, seed)
            b = slow.run(make_policy("oak-no-age", seed=seed), lam, seed)
            assert _key(a) == _key(b), (workload, lam, seed)
            assert len(a.decision_ms) < len(b.decision_ms) / 4  # idle rounds were skipped, not decided


@pytest.mark.portable
def test_fast_forward_bit_identical_off_grid_times() -> None:
    """A round length that is not a binary fraction and jittered arrivals: the skipped rounds' times and T_queue
    sums must still follow the event loop's float arithmetic exactly (and the horizon is off the grid)."""
    fast, slow = _pair("medium", PhysicsOptions(round_s=17.3, arrival_jitter_s=37.0, horizon_s=40_001.7))
    for seed in (3, 4):
        a = fast.run(make_policy("oak-no-age"), 0.1, seed)
        b = slow.run(make_policy("oak-no-age"), 0.1, seed)
        assert _key(a) == _key(b), seed
        assert len(a.decision_ms) < len(b.decision_ms) / 2


def test_clock_reading_policy_unchanged() -> None:
    """OAK reads the clock (age key): every round is still decided, with the same results."""
    fast, slow = _pair("small", PhysicsOptions(horizon_s=HORIZON_S))
    a = fast.run(make_policy("oak"), 0.1, 2)
    b = slow.run(make_policy("oak"), 0.1, 2)
    assert _key(a) == _key(b)
    assert len(a.decision_ms) == len(b.decision_ms)


@dataclass
class _Opaque(PolicyBase):
    """Wraps a policy without overriding ``reads_clock`` (PolicyBase's default, True): the simulator must treat
    it as reading the clock, even though the policy it wraps does not."""

    inner: Policy
    calls: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    def decide(self, snap: RoundSnapshot) -> Allocation:
        self.calls += 1
        return self.inner.decide(snap)


def test_policy_without_attribute_is_never_fast_forwarded() -> None:
    fast, slow = _pair("medium", PhysicsOptions(horizon_s=60_000.0))
    opaque = _Opaque(make_policy("oak-no-age"))
    assert opaque.reads_clock
    a = fast.run(opaque, 0.1, 0)
    b = slow.run(make_policy("oak-no-age"), 0.1, 0)
    assert _key(a) == _key(b)
    assert opaque.calls == len(a.decision_ms) == len(b.decision_ms)
    c = fast.run(make_policy("oak-no-age"), 0.1, 0)
    assert _key(c) == _key(b) and len(c.decision_ms) < len(b.decision_ms)


def test_observer_disables_fast_forward() -> None:
    fast, slow = _pair("medium", PhysicsOptions(horizon_s=60_000.0))
    seen: list[float] = []
    a = fast.run(make_policy("oak-no-age"), 0.1, 0, on_round=lambda snap, _a, _p: seen.append(snap.time_s))
    b = slow.run(make_policy("oak-no-age"), 0.1, 0)
    assert _key(a) == _key(b)
    assert len(seen) == len(a.decision_ms) == len(b.decision_ms)


def test_reads_clock_declarations() -> None:
    assert PolicyBase().reads_clock and not PolicyBase().needs_node_goodput  # the defaults
    assert not make_policy("oak-no-age").reads_clock
    assert not make_policy("goodput").reads_clock
    assert not make_policy("oak-no-age", restart_factor="off").reads_clock
    assert make_policy("oak-no-age", restart_factor="aggregate").reads_clock  # reads age_s
    assert make_policy("oak-no-age", restart_factor="sia").reads_clock  # reads age_s
    for name in (
        "oak-paper",
        "oak-no-restart",
        "oak-aggregate",
        "oak-sia-factor",
        "sia",
        "sia-paper",
        "pollux",
        "hybrid-oak",
        "gavel",
        "drf",
    ):
        assert make_policy(name, seed=0).reads_clock, name
    assert make_policy("oak").reads_clock  # the product's waiting guard reads time_s and age_s
    assert not make_policy("oak", max_wait_s=math.inf).reads_clock  # without the guard and the age key
    assert make_policy("oak", age_key=True, max_wait_s=math.inf).reads_clock


@pytest.mark.portable
def test_progress_observer_changes_nothing_and_counts_every_finish() -> None:
    """A progress bar's observer sees (time, finished, jobs) from 0 to the run's end, never going back, and the
    run (fast-forward included: the same rounds) is bit-identical to one without it."""
    sim, _ = _pair("medium", PhysicsOptions(horizon_s=HORIZON_S))
    seen: list[tuple[float, int, int]] = []
    plain = sim.run(make_policy("oak-no-age", seed=0), 0.1, 0)
    watched = sim.run(make_policy("oak-no-age", seed=0), 0.1, 0, on_progress=lambda *a: seen.append(a))
    assert _key(watched) == _key(plain)
    assert len(watched.decision_ms) == len(plain.decision_ms)
    n = len(plain.jobs)
    finished = sum(j.jct_s is not None for j in plain.jobs)
    assert seen[0] == (min(j.submit_s for j in plain.jobs), 0, n)
    assert seen[-1] == (plain.end_time_s, finished, n)
    assert all(a[0] <= b[0] and b[2] == n for a, b in itertools.pairwise(seen))
    # between the first call and the last, one call per instant at which jobs finish: each adds some
    middle = seen[:-1]
    assert len(middle) > 2 and all(b[1] > a[1] for a, b in itertools.pairwise(middle))
    assert seen[-2][1] == finished
