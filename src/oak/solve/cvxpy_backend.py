"""The paper's modelling stack: CVXPY with the GLPK_MI integer solver (optional extra ``oak-scheduler[cvxpy]``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from oak.errors import OakInputError
from oak.model.snapshot import IntArray
from oak.solve.assignment import AssignmentProblem


def solve_cvxpy(problem: AssignmentProblem) -> IntArray:
    """Optimal choice per job (−1 = none) via CVXPY + GLPK_MI."""
    try:
        import cvxpy as cp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise OakInputError("solver 'cvxpy' needs the optional extra: pip install 'oak-scheduler[cvxpy]'") from exc
    n_jobs = problem.num_jobs
    rows, cols = np.nonzero(problem.valid)
    choice = np.full(n_jobs, -1, dtype=np.int64)
    if len(rows) == 0:
        return choice
    x = cp.Variable(len(rows), boolean=True)
    job_matrix = np.zeros((n_jobs, len(rows)))
    job_matrix[rows, np.arange(len(rows))] = 1.0
    type_matrix = np.zeros((len(problem.capacity), len(rows)))
    type_matrix[problem.gpu_type[cols], np.arange(len(rows))] = problem.gpus[cols]
    constraints: list[Any] = [job_matrix @ x <= 1, type_matrix @ x <= problem.capacity]
    prob = cp.Problem(cp.Maximize(problem.value[rows, cols] @ x), constraints)
    prob.solve(solver=cp.GLPK_MI)  # type: ignore[no-untyped-call]
    if prob.status not in ("optimal", "optimal_inaccurate") or x.value is None:
        raise RuntimeError(f"CVXPY/GLPK_MI did not solve the round's MILP: status {prob.status}")
    chosen = np.asarray(x.value) > 0.5
    choice[rows[chosen]] = cols[chosen]
    return choice
