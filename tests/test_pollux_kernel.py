"""Pollux's compiled NSGA-II (engine "numba") against the NumPy operators it re-implements."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_pollux import check_feasible, make_snapshot, repair_cases, uniform_goodput

from oak.model.cluster import homogeneous_cluster
from oak.model.snapshot import RoundSnapshot
from oak.policies import pollux_kernel as pk
from oak.policies.nsga import _hash_weights
from oak.policies.pollux import PolluxPolicy, PolluxProblem
from oak.sim import Simulator
from oak.workloads import load_workload

#: its module-scoped fixtures are built once, on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_pollux_kernel")


def kernel_repair(prob: PolluxProblem, x: np.ndarray, seed: int) -> np.ndarray:
    y = np.array(x, dtype=np.int64)
    pk.repair(
        y,
        prob.node_gpus,
        prob.node_type,
        prob.min_gpus,
        prob.max_replicas,
        prob.type_rank,
        np.ascontiguousarray(prob.speedup),
        np.random.default_rng(seed),
    )
    return y


@pytest.mark.portable
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repair_cases(), st.sampled_from([-1.0, 0.0, 0.5, 1.0]))
def test_repair_is_bit_identical_and_objective_equal(case: tuple[RoundSnapshot, np.ndarray, int], p: float) -> None:
    snap, pop, seed = case
    prob = PolluxProblem.from_snapshot(snap, p, 30.0)
    want = prob.repair(pop, np.random.default_rng(seed))
    got = kernel_repair(prob, pop, seed)
    assert np.array_equal(got, want)
    f_np = prob.evaluate(want)
    f_nb = pk.evaluate(want, prob.current, prob.node_type, np.ascontiguousarray(prob.speedup), prob.restart_factor, p)
    np.testing.assert_allclose(f_nb, f_np, rtol=1e-13, atol=0)
    if p == -1.0:  # reciprocal both ways: only the summation order may differ
        np.testing.assert_allclose(f_nb, f_np, rtol=4e-16 * snap.num_jobs, atol=0)
    # mutated individuals repair to feasible ones
    x = want.copy()
    pk.mutate(x, prob.current, prob.node_gpus, np.random.default_rng(seed + 1))
    check_feasible(snap, prob, kernel_repair(prob, x, seed))


def test_mutation_has_the_numpy_law() -> None:
    """Same input, many individuals: the compiled mutation's event frequencies match the NumPy one's."""
    cluster = homogeneous_cluster("aws", 3, 4)
    cur = np.array([[1, 0, 0], [0, 2, 0], [0, 0, 1], [1, 0, 1]])
    snap = make_snapshot(cluster, uniform_goodput(cluster, 4), current_replicas=cur)
    prob = PolluxProblem.from_snapshot(snap, -1.0, 30.0)
    x = np.repeat(np.array([[[2, 0, 1], [1, 1, 0], [0, 1, 2], [1, 2, 1]]]), 40_000, axis=0)
    a = prob.mutate(x, np.random.default_rng(0))
    b = x.copy()
    pk.mutate(b, prob.current, prob.node_gpus, np.random.default_rng(0))

    def stats(y: np.ndarray) -> list[float]:
        return [
            float(np.mean(np.all(y == cur[None], axis=2))),  # rows equal to the current allocation
            float(np.mean(y < x)),  # entries lowered (reset or zeroed)
            float(np.mean(y > x)),  # entries grown
            float(np.mean(y)),
        ]

    for sa, sb in zip(stats(a), stats(b), strict=True):
        assert sb == pytest.approx(sa, abs=4 * np.sqrt(max(sa, 1e-3) / len(x)) + 3e-3)


@pytest.fixture(scope="module")
def medium_rounds() -> list[RoundSnapshot]:
    snaps: list[RoundSnapshot] = []
    sim = Simulator(load_workload("medium"))
    sim.run(
        PolluxPolicy(population=10, generations=3, engine="numpy"), 0.05, 0, on_round=lambda s, a, g: snaps.append(s)
    )
    return [s for s in snaps if s.num_jobs >= 3][::15][:12]


@pytest.mark.portable
def test_numba_engine_is_deterministic_feasible_and_as_good(medium_rounds: list[RoundSnapshot]) -> None:
    gaps = []
    for snap in medium_rounds:
        a = PolluxPolicy(seed=2).decide(snap)
        b = PolluxPolicy(seed=2).decide(snap)
        assert a.replicas is not None and b.replicas is not None
        assert np.array_equal(a.replicas, b.replicas) and a.objective == b.objective
        assert a.info["evaluations"] == 100 * 100
        prob = PolluxPolicy().problem(snap)
        best = a.replicas[prob.order][None]
        check_feasible(snap, prob, best)
        assert a.objective == pytest.approx(-prob.evaluate(best)[0], rel=1e-12)
        ref = PolluxPolicy(seed=2, engine="numpy").decide(snap)
        gaps.append((ref.objective - a.objective) / max(abs(ref.objective), 1e-12))
    # the same operators and budget reach the same quality (different random streams)
    assert float(np.mean(gaps)) < 0.01
    assert max(gaps) < 0.05


def test_population_warm_start_carries_over(medium_rounds: list[RoundSnapshot]) -> None:
    snap = medium_rounds[-1]
    first = PolluxPolicy(seed=0).decide(snap)
    state: Any = first.state
    assert state.population.shape[0] == 100
    assert np.array_equal(state.population[0], first.replicas[PolluxPolicy().problem(snap).order])


@st.composite
def survivor_cases(draw: Any) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A (μ + λ) union with many equal individuals and many equal objectives, and the number to keep."""
    total = draw(st.integers(1, 40))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(0, draw(st.sampled_from([2, 3, 50])), size=(total, *shape)).astype(np.int64)
    f = -rng.integers(0, draw(st.sampled_from([1, 3, 1000])), size=total).astype(np.float64)
    return x, f, draw(st.integers(1, total)), seed


@pytest.mark.portable
@settings(max_examples=80, deadline=None)
@given(survivor_cases(), st.booleans())
def test_survivors_are_unique_first_then_by_objective_then_by_the_shuffle(
    case: tuple[np.ndarray, np.ndarray, int, int], collide: bool
) -> None:
    """The compiled survival against its definition: an individual equal to an earlier one is a duplicate;
    keep the n best by (duplicate, F, place in a shuffle drawn from the same generator). Zero hash weights
    make every row collide, so equal hashes must still be told apart by their rows."""
    x, f, n, seed = case
    width = x[0].size
    weights = np.zeros(width, dtype=np.uint64) if collide else _hash_weights(width)
    flat = x.reshape(len(x), -1)
    dup = np.array([any(np.array_equal(flat[i], flat[b]) for b in range(i)) for i in range(len(x))])
    assert np.array_equal(pk._duplicates(flat, weights), dup.astype(np.int64))
    perm = np.arange(len(x))
    pk._shuffle(perm, np.random.default_rng(seed))
    place = np.empty(len(x), dtype=np.int64)
    place[perm] = np.arange(len(x))
    want = np.lexsort((place, f, dup))[:n]
    got = pk._survive(x, f, n, weights, np.random.default_rng(seed))
    assert np.array_equal(got, want)
