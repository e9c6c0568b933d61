"""The per-round problem of paper §III-B in its generic form, and the dispatch to exact solvers.

    maximise  Σ_ij x_ij · value_ij
    s.t.      Σ_j x_ij ≤ 1 (each job), Σ_ij x_ij · gpus_j ≤ capacity_t (each GPU type t), x binary,
              x_i,forced_i = 1 where forced_i ≥ 0.

``value_ij`` is the gain of giving job i configuration j over leaving it unallocated: OAK's objective
Σ x·U + μ_na·Σ(1 − Σ_j x) equals μ_na·J + Σ x·(U − μ_na), so value = U − μ_na.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import BoolArray, FloatArray, IntArray

SOLVER_METHODS = ("auto", "dp", "highs", "cvxpy")

#: The DP is used by ``auto`` while the product of (capacity + 1) over GPU types stays below this.
DP_MAX_STATES = 200_000


@dataclass(frozen=True, eq=False)
class AssignmentProblem:
    """value/valid: (J, C); gpus/gpu_type: (C,); capacity: (T,) GPUs; forced: (J,) config or −1."""

    value: FloatArray
    valid: BoolArray
    gpus: IntArray
    gpu_type: IntArray
    capacity: IntArray
    forced: IntArray | None = None

    @property
    def num_jobs(self) -> int:
        return int(self.value.shape[0])


@dataclass(frozen=True, eq=False)
class AssignmentResult:
    """choice: (J,) configuration per job or −1; objective: Σ chosen values; wall_ms: solver wall time."""

    choice: IntArray
    objective: float
    method: str
    wall_ms: float


def solve_assignment(problem: AssignmentProblem, method: str = "auto") -> AssignmentResult:
    """Solve exactly with the DP (``dp``), HiGHS (``highs``) or CVXPY + GLPK_MI (``cvxpy``).

    ``auto`` takes the DP when the capacity state space is small (exact, and far faster than a MILP
    solver's fixed overhead at cluster scales of tens of GPUs) and HiGHS otherwise.
    """
    if method not in SOLVER_METHODS:
        raise ValueError(f"solver method {method!r}: expected one of {SOLVER_METHODS}")
    start = time.perf_counter()
    reduced, base_choice, base_value = _apply_forced(problem)
    if method == "auto":
        states = int(np.prod(reduced.capacity.astype(np.float64) + 1.0))
        method = "dp" if states <= DP_MAX_STATES else "highs"
    if method == "dp":
        from oak.solve.dp import solve_dp

        choice = solve_dp(reduced)
    elif method == "highs":
        from oak.solve.highs import solve_highs

        choice = solve_highs(reduced)
    else:
        from oak.solve.cvxpy_backend import solve_cvxpy

        choice = solve_cvxpy(reduced)
    choice = np.where(base_choice >= 0, base_choice, choice)
    objective = base_value + _objective(reduced, choice, skip=base_choice >= 0)
    wall_ms = (time.perf_counter() - start) * 1e3
    return AssignmentResult(choice=choice, objective=objective, method=method, wall_ms=wall_ms)


def _objective(problem: AssignmentProblem, choice: IntArray, skip: BoolArray) -> float:
    rows = np.flatnonzero((choice >= 0) & ~skip)
    return float(problem.value[rows, choice[rows]].sum())


def _apply_forced(problem: AssignmentProblem) -> tuple[AssignmentProblem, IntArray, float]:
    """Fix forced jobs: take their GPUs out of the capacity and their rows out of the problem."""
    n = problem.num_jobs
    base_choice = np.full(n, -1, dtype=np.int64)
    if problem.forced is None or not np.any(problem.forced >= 0):
        return problem, base_choice, 0.0
    forced = problem.forced
    rows = np.flatnonzero(forced >= 0)
    cols = forced[rows]
    capacity = problem.capacity.astype(np.int64).copy()
    np.subtract.at(capacity, problem.gpu_type[cols], problem.gpus[cols])
    if np.any(capacity < 0):
        raise ValueError("forced configurations exceed the cluster's capacity")
    valid = problem.valid.copy()
    valid[rows, :] = False
    base_choice[rows] = cols
    base_value = float(problem.value[rows, cols].sum())
    reduced = AssignmentProblem(problem.value, valid, problem.gpus, problem.gpu_type, capacity, None)
    return reduced, base_choice, base_value


def check_feasible(problem: AssignmentProblem, choice: IntArray) -> None:
    """Raise AssertionError if ``choice`` breaks validity, forcing or a capacity."""
    rows = np.flatnonzero(choice >= 0)
    assert np.all(problem.valid[rows, choice[rows]]), "invalid configuration chosen"
    used = np.zeros_like(problem.capacity)
    np.add.at(used, problem.gpu_type[choice[rows]], problem.gpus[choice[rows]])
    assert np.all(used <= problem.capacity), f"capacity exceeded: {used} > {problem.capacity}"
    if problem.forced is not None:
        f = problem.forced >= 0
        assert np.all(choice[f] == problem.forced[f]), "forced configuration not kept"
