"""The Lagrangian price method: always feasible, its bound is never below the exact optimum, small gaps at scale."""

from __future__ import annotations

import numpy as np
import pytest

from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import check_feasible
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
    assert res.gap < 1e-2
