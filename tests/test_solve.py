"""Exact solvers agree with brute force and with each other."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import check_feasible


def random_problem(rng: np.random.Generator, n_jobs: int, types: int, forced: bool = False) -> AssignmentProblem:
    gpus_per_node = 4
    nodes = int(rng.integers(1, 4))
    sizes = [1, 2, 4] + [k * gpus_per_node for k in range(2, nodes + 1)]
    gpus = np.array(sizes * types, dtype=np.int64)
    gpu_type = np.repeat(np.arange(types), len(sizes)).astype(np.int64)
    capacity = np.full(types, nodes * gpus_per_node, dtype=np.int64)
    capacity[0] = max(1, capacity[0] - int(rng.integers(0, 3)))
    value = rng.normal(0.3, 1.0, size=(n_jobs, len(gpus)))
    valid = rng.random((n_jobs, len(gpus))) < 0.8
    valid &= gpus[None, :] <= capacity[gpu_type][None, :]
    forced_arr = None
    if forced:
        forced_arr = np.full(n_jobs, -1, dtype=np.int64)
        i = int(rng.integers(0, n_jobs))
        cands = np.flatnonzero(valid[i] & (gpus <= 2))
        if len(cands):
            forced_arr[i] = cands[0]
    return AssignmentProblem(value, valid, gpus, gpu_type, capacity, forced_arr)


def brute_force(problem: AssignmentProblem) -> float:
    options = []
    for i in range(problem.num_jobs):
        if problem.forced is not None and problem.forced[i] >= 0:
            options.append([int(problem.forced[i])])
        else:
            options.append([-1, *np.flatnonzero(problem.valid[i]).tolist()])
    best = -np.inf
    for combo in itertools.product(*options):
        used = np.zeros_like(problem.capacity)
        total = 0.0
        for i, j in enumerate(combo):
            if j >= 0:
                used[problem.gpu_type[j]] += problem.gpus[j]
                total += problem.value[i, j]
        if np.all(used <= problem.capacity):
            best = max(best, total)
    return float(best)


@pytest.mark.parametrize("seed", range(30))
def test_dp_and_highs_equal_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, n_jobs=int(rng.integers(1, 6)), types=int(rng.integers(1, 3)), forced=seed % 3 == 0)
    expected = brute_force(problem)
    for method in ("dp", "highs"):
        res = solve_assignment(problem, method)
        check_feasible(problem, res.choice)
        assert res.objective == pytest.approx(expected, abs=1e-9), method


@pytest.mark.parametrize("seed", range(8))
def test_cvxpy_glpk_matches_highs(seed: int) -> None:
    pytest.importorskip("cvxpy")
    rng = np.random.default_rng(100 + seed)
    problem = random_problem(rng, n_jobs=8, types=2)
    a = solve_assignment(problem, "highs")
    b = solve_assignment(problem, "cvxpy")
    check_feasible(problem, b.choice)
    assert b.objective == pytest.approx(a.objective, abs=1e-7)


def test_dp_matches_highs_on_larger_instances() -> None:
    rng = np.random.default_rng(7)
    for _ in range(10):
        problem = random_problem(rng, n_jobs=20, types=2)
        dp = solve_assignment(problem, "dp")
        hi = solve_assignment(problem, "highs")
        check_feasible(problem, dp.choice)
        assert dp.objective == pytest.approx(hi.objective, abs=1e-7)


def test_unknown_method_rejected() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="solver method"):
        solve_assignment(random_problem(rng, 2, 1), "glpk")


def test_results_carry_a_bound_and_gap() -> None:
    rng = np.random.default_rng(3)
    problem = random_problem(rng, n_jobs=12, types=2, forced=True)
    exact = solve_assignment(problem, "highs")
    for method in ("dp", "highs", "lagrangian", "auto"):
        res = solve_assignment(problem, method)
        check_feasible(problem, res.choice)
        assert res.bound >= exact.objective - 1e-9
        assert res.gap >= 0.0
        if method in ("dp", "highs"):
            assert res.bound == res.objective and res.gap == 0.0
