"""The Lagrangian price method: always feasible, its bound is never below the exact optimum and equals the LP
relaxation's optimum, small gaps at scale."""

from __future__ import annotations

import numpy as np
import pytest

from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import check_feasible
from oak.solve.highs import solve_lp_max
from oak.solve.lagrangian import dual_value, solve_lagrangian


def instance(rng: np.random.Generator, jobs: int, types: int, per_node: int, nodes: int) -> AssignmentProblem:
    sizes = [2**k for k in range(int(np.log2(per_node)) + 1)] + [k * per_node for k in range(2, nodes + 1)]
    gpus = np.array(sizes * types, dtype=np.int64)
    gpu_type = np.repeat(np.arange(types), len(sizes)).astype(np.int64)
    capacity = np.full(types, per_node * nodes, dtype=np.int64)
    speed = (
        rng.uniform(0.5, 1.0, size=(jobs, 1)) * np.log2(1 + gpus)[None, :] * rng.uniform(0.8, 1.2, size=types)[gpu_type]
    )
    value = np.sqrt(speed + 1.0) - 1.1 + rng.normal(0, 0.05, size=(jobs, len(gpus)))
    valid = rng.random((jobs, len(gpus))) < 0.9
    return AssignmentProblem(value, valid, gpus, gpu_type, capacity)


@pytest.mark.parametrize("seed", range(12))
def test_feasible_and_bound_above_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = [(8, 1, 4, 3), (30, 2, 4, 4), (60, 3, 8, 4), (120, 2, 8, 8)][seed % 4]
    problem = instance(rng, *shape)
    exact = solve_assignment(problem, "highs").objective
    res = solve_lagrangian(problem)
    check_feasible(problem, res.choice)
    assert res.objective <= exact + 1e-9
    assert res.bound >= exact - 1e-7
    assert res.gap >= -1e-9


def test_any_prices_give_an_upper_bound() -> None:
    rng = np.random.default_rng(3)
    problem = instance(rng, 20, 2, 4, 3)
    exact = solve_assignment(problem, "highs").objective
    for _ in range(50):
        bound, _ = dual_value(problem, rng.uniform(0, 2, size=2))
        assert bound >= exact - 1e-9


def test_gap_is_small_with_many_jobs() -> None:
    rng = np.random.default_rng(11)
    problem = instance(rng, 1000, 3, 8, 43)  # 344 GPUs per type, 1,000 jobs
    res = solve_lagrangian(problem)
    check_feasible(problem, res.choice)
    assert res.gap < 1e-3


def lp_relaxation(problem: AssignmentProblem) -> float:
    """The LP relaxation's optimum, solved in full by HiGHS."""
    rows, cols = np.nonzero(problem.valid)
    n = len(rows)
    col_rows = np.empty(2 * n, dtype=np.int64)
    col_rows[0::2] = rows
    col_rows[1::2] = problem.num_jobs + problem.gpu_type[cols]
    col_coef = np.empty(2 * n)
    col_coef[0::2] = 1.0
    col_coef[1::2] = problem.gpus[cols]
    row_upper = np.concatenate([np.ones(problem.num_jobs), problem.capacity.astype(np.float64)])
    solved = solve_lp_max(
        problem.value[rows, cols], np.ones(n), col_rows, col_coef, np.arange(0, 2 * n + 1, 2), row_upper
    )
    assert solved is not None
    x, _ = solved
    return float(problem.value[rows, cols] @ x)


@pytest.mark.parametrize("seed", range(4))
def test_bound_is_the_lp_relaxation_optimum(seed: int) -> None:
    """The dual's minimum over λ ≥ 0 is the LP bound; coordinate descent plus the core LP reaches it."""
    rng = np.random.default_rng(50 + seed)
    problem = instance(rng, [40, 150, 400, 800][seed], 1 + seed % 4, 8, 4 + seed)
    res = solve_lagrangian(problem)
    assert res.bound == pytest.approx(lp_relaxation(problem), rel=1e-9, abs=1e-9)
