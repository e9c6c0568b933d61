"""Hybrid OAK (paper §V-E): repair feasibility, optimality against the MILP, OAK's scoring, simulation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oak.policies.hybrid as hybrid_module
from oak.errors import OakInputError
from oak.model.cluster import Cluster, Node
from oak.model.snapshot import RoundSnapshot, frozen_array
from oak.policies import make_policy
from oak.policies.hybrid import HybridOakPolicy, HybridProblem
from oak.policies.nsga import GeneticState, job_order
from oak.scoring import UtilityParams, utility_matrix
from oak.sim import Simulator
from oak.workloads import load_workload
from support.snapshots import MIXED_12, PAPER_12, check_feasible, milp_optimum, random_snapshot

# ---------------------------------------------------------------- (a) repair feasibility


@st.composite
def repair_cases(draw: Any) -> tuple[RoundSnapshot, np.ndarray, int]:
    k = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=k, max_size=k))
    kinds = draw(st.lists(st.sampled_from(["aws", "rtx"]), min_size=k, max_size=k))
    cluster = Cluster(tuple(Node(i, kinds[i], sizes[i]) for i in range(k)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    snap = random_snapshot(rng, cluster, draw(st.integers(1, 10)))
    big = draw(st.sampled_from([snap.num_configs, 10**9]))
    pop = rng.integers(-big, big + 1, size=(draw(st.integers(1, 15)), snap.num_jobs))
    return snap, pop, seed


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repair_cases())
def test_repair_always_feasible(case: tuple[RoundSnapshot, np.ndarray, int]) -> None:
    snap, pop, seed = case
    prob = HybridOakPolicy().problem(snap)
    rng = np.random.default_rng(seed)
    x = prob.repair(pop, rng)
    assert x.shape == pop.shape
    check_feasible(snap, x)
    assert np.array_equal(prob.repair(x, rng), x), "a feasible individual is left alone"
    # the first job in order keeps any valid configuration (a single configuration always fits the cluster)
    first = job_order(snap)[0]
    ok = (pop[:, first] >= 0) & (pop[:, first] < snap.num_configs)
    ok[ok] = snap.valid[first, pop[ok, first]]
    assert np.array_equal(x[ok, first], pop[ok, first])
    # any job that keeps a configuration but not its own has fallen back to a smaller one of the same type
    inside = (pop >= 0) & (pop < snap.num_configs)
    moved = inside & (x >= 0) & (x != pop)
    src = np.where(inside, pop, 0)
    assert np.all(snap.config_type[x[moved]] == snap.config_type[src[moved]])
    assert np.all(snap.config_gpus[x[moved]] < snap.config_gpus[src[moved]])
    for y in (prob.mutate(x, rng), *prob.crossover(x, prob.random_individuals(len(x), rng), rng)):
        check_feasible(snap, prob.repair(y, rng))


def test_repair_falls_back_within_the_type_in_job_order() -> None:
    snap = random_snapshot(np.random.default_rng(0), PAPER_12, 3)
    # make every configuration valid; order: job 1, job 2, job 0 (attained service)
    valid = np.ones_like(snap.valid)
    attained = np.array([30.0, 10.0, 20.0])
    snap = RoundSnapshot(
        **{
            **snap.__dict__,
            "valid": frozen_array(valid, bool),
            "attained_gpu_s": frozen_array(attained, np.float64),
        }
    )
    prob = HybridOakPolicy().problem(snap)
    gpus = list(snap.config_gpus)
    c8, c4, c2, c1 = gpus.index(8), gpus.index(4), gpus.index(2), gpus.index(1)
    # job 1 takes 8, job 2 wants 8 but only 4 are left → largest fitting (4), job 0 wants 2 → nothing left
    x = prob.repair(np.array([[c2, c8, c8]]), np.random.default_rng(0))[0]
    assert x.tolist() == [-1, c8, c4]
    x = prob.repair(np.array([[c1, c8, c2]]), np.random.default_rng(0))[0]
    assert x.tolist() == [c1, c8, c2]


# ---------------------------------------------------------------- (b) optimality against the MILP


def test_never_above_and_mostly_at_the_milp_optimum() -> None:
    pol = HybridOakPolicy()
    hits, n = 0, 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        snap = random_snapshot(rng, PAPER_12 if seed % 2 == 0 else MIXED_12, int(rng.integers(2, 7)))
        opt = milp_optimum(snap, pol.params)
        alloc = pol.decide(snap)
        check_feasible(snap, alloc.config)
        assert alloc.objective <= opt + 1e-9 * max(1.0, abs(opt))
        hits += abs(alloc.objective - opt) <= 1e-9 * max(1.0, abs(opt))
        n += 1
    # Measured on 200 + 200 instances of each kind: 98 % (homogeneous), 76 % (two GPU types), so ~87 % here,
    # σ ≈ 2.1 hits of 40 (binomial). Which instances a random search solves moves with any change of its path
    # (a tie broken differently by another libm or SIMD width, another GA seed: 31-35 of these 40 for seeds 0-9),
    # so the bound sits ~3σ below the mean: 28 of 40. The hard guarantee is the assertion above (never better
    # than the optimum, always feasible).
    assert hits / n >= 0.7, f"{hits}/{n} at the optimum"


def test_finds_the_optimum_of_a_real_round() -> None:
    """Rounds captured from the paper-12 cluster: the hybrid's objective matches OAK's MILP."""
    snaps: list[RoundSnapshot] = []
    Simulator(load_workload("small")).run(
        make_policy("oak"), 0.0, 0, on_round=lambda s, a, p: snaps.append(s) if s.num_jobs >= 3 else None
    )
    assert len(snaps) >= 5
    pol = HybridOakPolicy()
    for snap in snaps[:: max(1, len(snaps) // 10)]:
        opt = milp_optimum(snap, pol.params)
        assert pol.decide(snap).objective == pytest.approx(opt, rel=1e-9)


# ---------------------------------------------------------------- (c) OAK's scoring function


def test_uses_oaks_utility_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = random_snapshot(np.random.default_rng(7), PAPER_12, 4)
    pol = HybridOakPolicy.with_params(p=0.25, mu_na=2.0)
    calls: list[tuple[RoundSnapshot, UtilityParams]] = []
    real = utility_matrix

    def spy(s: RoundSnapshot, params: UtilityParams) -> Any:
        calls.append((s, params))
        return real(s, params)

    monkeypatch.setattr(hybrid_module, "utility_matrix", spy)
    alloc = pol.decide(snap)
    assert len(calls) == 1 and calls[0][0] is snap and calls[0][1] == pol.params
    # the reported objective is Σ U[i, x_i] + μ_na·#unallocated with OAK's own U
    u = real(snap, pol.params)
    x = alloc.config
    expected = sum(u[i, c] for i, c in enumerate(x) if c >= 0) + 2.0 * int((x < 0).sum())
    assert alloc.objective == pytest.approx(expected)

    # a designed score is followed: only configuration 2 (4 GPUs) has any value, for every job
    def designed(s: RoundSnapshot, params: UtilityParams) -> Any:
        out = np.zeros((s.num_jobs, s.num_configs))
        out[:, 2] = 100.0
        return out

    monkeypatch.setattr(hybrid_module, "utility_matrix", designed)
    valid = frozen_array(np.ones_like(snap.valid), bool)
    x = pol.decide(RoundSnapshot(**{**snap.__dict__, "valid": valid})).config
    assert sorted(x.tolist()) == [-1, 2, 2, 2]  # three 4-GPU jobs fill the 12 GPUs


# ---------------------------------------------------------------- simulation, warm start, parameters


@pytest.mark.portable
def test_small_simulation_finishes_deterministically() -> None:
    res = Simulator(load_workload("small")).run(HybridOakPolicy(), 0.1, 2)
    assert res.finished
    again = Simulator(load_workload("small")).run(HybridOakPolicy(), 0.1, 2)
    a, b = res.to_json(), again.to_json()
    for run in (a, b):
        for key in ("wall_s", "decision_ms_mean", "decision_ms_p95", "decision_ms_max"):
            run.pop(key)
    assert a == b


def test_decide_is_deterministic_and_warm_starts_by_name() -> None:
    rng = np.random.default_rng(3)
    pol = HybridOakPolicy()
    first_snap = random_snapshot(rng, MIXED_12, 5, names=("a", "b", "c", "d", "e"))
    first = pol.decide(first_snap)
    again = pol.decide(first_snap)
    assert np.array_equal(first.config, again.config) and first.objective == again.objective
    assert isinstance(first.state, GeneticState)
    snap = random_snapshot(rng, MIXED_12, 4, names=("e", "new", "a", "c"), policy_state=first.state)
    prob = pol.problem(snap)
    init = pol.initial_population(snap, prob, np.random.default_rng(0))
    assert init.shape == (pol.population, 4)
    assert init[0].tolist() == snap.current.tolist()
    prev = first.state.population
    assert np.array_equal(init[1:16, 0], prev[:15, 4])  # "e" re-indexed
    assert np.all(init[1:16, 1] == -1)  # the new job starts unallocated
    alloc = pol.decide(snap)
    check_feasible(snap, alloc.config)
    assert alloc.objective <= milp_optimum(snap, pol.params) + 1e-9


def test_pymoo_engine_agrees() -> None:
    snap = random_snapshot(np.random.default_rng(11), PAPER_12, 4)
    alloc = HybridOakPolicy(engine="pymoo").decide(snap)
    check_feasible(snap, alloc.config)
    assert alloc.objective <= milp_optimum(snap, UtilityParams()) + 1e-9


def test_registry_and_parameters() -> None:
    pol = make_policy("hybrid-oak", solver="dp", p=0.25, restart_factor="aggregate", generations=5)
    assert isinstance(pol, HybridOakPolicy)
    assert pol.params.p == 0.25 and pol.generations == 5 and pol.name == "hybrid-oak"
    with pytest.raises(TypeError):
        HybridOakPolicy.with_params(bogus=1)
    with pytest.raises(OakInputError):
        HybridOakPolicy.with_params(p=-1.0)
    bad: list[dict[str, Any]] = [{"population": 1}, {"generations": 0}, {"seed": -1}, {"engine": "x"}]
    for kwargs in bad:
        with pytest.raises(OakInputError):
            HybridOakPolicy(**kwargs)
    empty = HybridProblem.from_snapshot(random_snapshot(np.random.default_rng(0), PAPER_12, 1), np.zeros((1, 5)), 1.1)
    assert empty.n_options[0] >= 2
