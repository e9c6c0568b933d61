"""Hybrid OAK's numba engine (oak.policies.hybrid_kernel): determinism, the same operators and results as
the numpy engine, feasibility, quality against the MILP; and HybridProblem's tables against a loop.

The engines are compared bit for bit. That holds on any CPU because both do only table lookups, comparisons and
sums in NumPy's pairwise order on the same utility table (numba without fastmath fuses no multiply-adds), and
draw the same random doubles; it ties the test to NumPy's summation algorithm, a version, not a CPU, property.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from oak.model.cluster import Cluster, Node, cluster_preset, homogeneous_cluster
from oak.model.snapshot import RoundSnapshot
from oak.policies import make_policy
from oak.policies.hybrid import HybridOakPolicy, HybridProblem, kernel_arrays, solve_numba
from oak.policies.nsga import job_order, policy_rng
from oak.scoring import UtilityParams, utility_matrix
from oak.solve.assignment import value_quantum
from support.snapshots import MIXED_12, PAPER_12, check_feasible, milp_optimum, random_snapshot

hybrid_kernel = pytest.importorskip("oak.policies.hybrid_kernel")

CLUSTERS = (
    PAPER_12,
    MIXED_12,
    homogeneous_cluster("aws", 8, 8),
    Cluster((Node(0, "aws", 2), Node(1, "rtx", 8), Node(2, "a100", 4))),
    cluster_preset("sia-64x4"),
)


def snapshots(n: int, max_jobs: int = 12, seed0: int = 0) -> list[RoundSnapshot]:
    out = []
    for seed in range(seed0, seed0 + n):
        rng = np.random.default_rng(seed)
        out.append(random_snapshot(rng, CLUSTERS[seed % len(CLUSTERS)], int(rng.integers(1, max_jobs + 1))))
    return out


def same_result(a: object, b: object) -> bool:
    x, y = a.state.population, b.state.population  # type: ignore[attr-defined]
    return (
        np.array_equal(a.config, b.config)  # type: ignore[attr-defined]
        and a.objective == b.objective  # type: ignore[attr-defined]
        and a.info["evaluations"] == b.info["evaluations"]  # type: ignore[attr-defined]
        and x.shape == y.shape
        and np.array_equal(x, y)
    )


def test_numba_is_the_default_and_import_oak_does_not_load_numba() -> None:
    assert HybridOakPolicy().engine == "numba"
    code = "import sys, oak, oak.policies, oak.policies.hybrid; assert 'numba' not in sys.modules, 'numba loaded'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- (a) determinism


@pytest.mark.portable
def test_same_seed_gives_bit_identical_results() -> None:
    for snap in snapshots(6):
        pol = HybridOakPolicy()
        first, again = pol.decide(snap), pol.decide(snap)
        assert same_result(first, again)
        assert first.info["evaluations"] <= pol.population * pol.generations
        # the kernel itself, twice from generators in the same state
        prob = pol.problem(snap)
        runs = []
        for _ in range(2):
            rng = policy_rng(0, snap)
            init = pol.initial_population(snap, prob, rng)
            runs.append(solve_numba(prob, init, pol.population, pol.generations, rng))
        a, b = runs
        assert np.array_equal(a.population, b.population) and np.array_equal(a.objective, b.objective)
        assert a.evaluations == b.evaluations


def test_same_results_as_the_numpy_engine() -> None:
    """Same draws, operators, duplicate hash and pairwise sums: the same population for the same seed,
    including odd populations, one generation, large J (pairwise sums above 128 terms) and warm starts."""
    for snap in snapshots(24):
        assert same_result(HybridOakPolicy(engine="numpy").decide(snap), HybridOakPolicy().decide(snap))
    rng = np.random.default_rng(99)
    big = homogeneous_cluster("aws", 40, 8)
    for population, generations, cluster, jobs in (
        (7, 5, PAPER_12, 6),
        (2, 3, MIXED_12, 4),
        (20, 1, PAPER_12, 5),
        (9, 4, big, 140),
    ):
        snap = random_snapshot(rng, cluster, jobs)
        a = HybridOakPolicy(engine="numpy", population=population, generations=generations, seed=3).decide(snap)
        b = HybridOakPolicy(population=population, generations=generations, seed=3).decide(snap)
        assert same_result(a, b)
        names = snap.job_names
        nxt = random_snapshot(rng, cluster, jobs, names=(*names[1:], "new"), policy_state=b.state)
        a2 = HybridOakPolicy(engine="numpy", population=population, generations=generations).decide(nxt)
        b2 = HybridOakPolicy(population=population, generations=generations).decide(nxt)
        assert same_result(a2, b2)


# ---------------------------------------------------------------- (b) repair and objective


def test_kernel_repair_and_objective_equal_the_problems() -> None:
    rng = np.random.default_rng(5)
    for snap in snapshots(40, max_jobs=10, seed0=100):
        prob = HybridOakPolicy().problem(snap)
        j, c = snap.num_jobs, snap.num_configs
        big = c if rng.random() < 0.5 else 10**9
        x = rng.integers(-big, big + 1, size=(int(rng.integers(1, 25)), j)).astype(np.int64)
        x[: len(x) // 2] = np.where(rng.random((len(x) // 2, j)) < 0.3, -1, rng.integers(0, c, (len(x) // 2, j)))
        arrays = kernel_arrays(prob, x)
        got = hybrid_kernel.repair(*arrays[:6], arrays[7])
        want = prob.repair(x, np.random.default_rng(0))
        assert got.dtype == np.int64 and np.array_equal(got, want)
        assert np.array_equal(x, arrays[0]), "repair returns a copy"
        obj = hybrid_kernel.objective(got, arrays[6])
        ref = prob.objective(got)
        np.testing.assert_allclose(obj, ref, rtol=1e-12, atol=0.0)
        assert np.array_equal(obj, ref), "numpy's pairwise summation order"


def test_pairwise_sum_matches_numpy_above_one_block() -> None:
    rng = np.random.default_rng(1)
    for j in (1, 7, 8, 9, 127, 128, 129, 255, 256, 300, 1029):
        value = rng.standard_normal((j, 3)) * np.exp(5 * rng.standard_normal((j, 3)))
        x = rng.integers(-1, 2, (4, j))
        ref = value[np.arange(j)[None, :], np.where(x < 0, 2, x)].sum(axis=1)
        assert np.array_equal(hybrid_kernel.objective(x, value), ref)


# ---------------------------------------------------------------- (c) feasibility


def test_every_returned_individual_is_feasible() -> None:
    for snap in snapshots(30, seed0=200):
        alloc = HybridOakPolicy().decide(snap)
        check_feasible(snap, alloc.config)
        check_feasible(snap, alloc.state.population)  # type: ignore[union-attr]
        # the search ran on the solvers' grid; the reported objective is the allocation's worth in the given values
        prob = HybridOakPolicy().problem(snap)
        u = utility_matrix(snap, HybridOakPolicy().params)
        x = alloc.config
        given = np.where(x >= 0, u[np.arange(len(x)), np.maximum(x, 0)], HybridOakPolicy().params.mu_na).sum()
        assert alloc.objective == pytest.approx(float(given), rel=1e-12)
        grid = value_quantum(prob.value, np.ones(prob.value.shape, dtype=bool))
        assert abs(alloc.objective - float(prob.objective(x[None, :])[0])) <= len(x) * grid


# ---------------------------------------------------------------- (d) quality


def test_quality_against_numpy_and_the_milp() -> None:
    params = UtilityParams()
    diffs = []
    for snap in snapshots(30, max_jobs=7, seed0=300):
        opt = milp_optimum(snap, params)
        fast = HybridOakPolicy().decide(snap).objective
        ref = HybridOakPolicy(engine="numpy").decide(snap).objective
        assert fast <= opt + 1e-9 * max(1.0, abs(opt))
        diffs.append((fast - ref) / max(1.0, abs(opt)))
    assert float(np.mean(diffs)) >= -1e-3


# ---------------------------------------------------------------- HybridProblem's tables


def loop_tables(snap: RoundSnapshot, utility: np.ndarray) -> dict[str, np.ndarray]:
    """best_fit / options / up / down built one job and configuration at a time (the definition)."""
    valid, gpus, ctype, cap = snap.valid, snap.config_gpus, snap.config_type, snap.capacity
    j, c, t_n = snap.num_jobs, snap.num_configs, len(cap)
    u = np.where(valid, utility, 0.0)
    best_fit = np.full((j, t_n, int(cap.max()) + 1), -1, dtype=np.int64)
    up = np.full((j, c + 1), -1, dtype=np.int64)
    down = np.full((j, c + 1), -1, dtype=np.int64)
    options = np.full((j, c + 1), -1, dtype=np.int64)
    for i in range(j):
        scan = sorted((int(gpus[k]), float(u[i, k]), k) for k in range(c) if valid[i, k])
        for g, _, k in scan:
            best_fit[i, ctype[k], g:] = k
        for t in range(t_n):
            same = [k for _, _, k in scan if ctype[k] == t]
            for n, k in enumerate(same):
                up[i, k] = same[min(n + 1, len(same) - 1)]
                down[i, k] = same[n - 1] if n > 0 else -1
        ok = np.flatnonzero(valid[i])
        options[i, : len(ok)] = ok
    return {"best_fit": best_fit, "options": options, "n_options": valid.sum(axis=1) + 1, "up": up, "down": down}


def test_problem_tables_match_the_loop_definition() -> None:
    rng = np.random.default_rng(8)
    for n, snap in enumerate(snapshots(60, seed0=400)):
        u = utility_matrix(snap, UtilityParams())
        if n % 3 == 1:
            u = np.round(u)  # ties in U: the index decides
        elif n % 3 == 2:
            u = rng.integers(0, 3, u.shape).astype(np.float64)
        prob = HybridProblem.from_snapshot(snap, u, 1.1)
        assert np.array_equal(prob.order, job_order(snap))
        for name, want in loop_tables(snap, u).items():
            got = getattr(prob, name)
            if name == "best_fit":  # kept up to the largest configuration; a look-up beyond reads its last column
                width = got.shape[2]
                assert width == min(int(snap.capacity.max()), int(snap.config_gpus.max())) + 1
                got = got[:, :, np.minimum(np.arange(want.shape[2]), width - 1)]
            assert got.dtype == np.int64 and np.array_equal(got, want), name


def test_tables_and_engines_where_a_type_is_larger_than_every_configuration() -> None:
    """On sia-64x4 (96 T4 GPUs, configurations of at most 64) best_fit stops at 64 GPUs: the loop definition's
    look-ups beyond read its last column, and the compiled and NumPy engines decide alike on the simulator's
    own rounds."""
    from oak.sim import PhysicsOptions, Simulator
    from oak.workloads import load_workload

    rounds: list[RoundSnapshot] = []
    sim = Simulator(load_workload("small"), cluster_preset("sia-64x4"), physics=PhysicsOptions(horizon_s=20_000))
    sim.run(make_policy("sia"), 0.1, 0, on_round=lambda snap, alloc, placed: rounds.append(snap))
    picked = rounds[:: max(1, len(rounds) // 12)]
    assert len(picked) >= 8
    for snap in picked:
        u = utility_matrix(snap, UtilityParams())
        prob = HybridProblem.from_snapshot(snap, u, 1.1)
        assert prob.best_fit.shape[2] == int(snap.config_gpus.max()) + 1 < int(snap.capacity.max()) + 1
        want = loop_tables(snap, u)["best_fit"]
        assert np.array_equal(
            prob.best_fit[:, :, np.minimum(np.arange(want.shape[2]), prob.best_fit.shape[2] - 1)], want
        )
        assert same_result(HybridOakPolicy(engine="numpy").decide(snap), HybridOakPolicy().decide(snap))
