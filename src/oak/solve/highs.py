"""The per-round MILP solved exactly with HiGHS (``highspy``), built column-wise in one call; and the small LPs
of the Lagrangian method's price polish."""

from __future__ import annotations

import os
import sys

import highspy
import numpy as np

from oak.model.snapshot import FloatArray, IntArray
from oak.solve.assignment import AssignmentProblem


def solve_highs(problem: AssignmentProblem, time_limit_s: float | None = None) -> IntArray:
    """Optimal choice per job (−1 = none) from HiGHS's branch and bound (default gap settings tightened).

    With ``time_limit_s`` (seconds) HiGHS stops there and :class:`HighsTimeLimit` is raised, carrying the best
    feasible choice found so far (or None)."""
    n_jobs = problem.num_jobs
    rows, cols = np.nonzero(problem.valid)
    choice = np.full(n_jobs, -1, dtype=np.int64)
    n = len(rows)
    if n == 0:
        return choice
    n_types = len(problem.capacity)
    h = _new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 1e-9)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = n_jobs + n_types
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = problem.value[rows, cols].astype(np.float64)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.ones(n)
    lp.row_lower_ = np.full(n_jobs + n_types, -highspy.kHighsInf)
    lp.row_upper_ = np.concatenate([np.ones(n_jobs), problem.capacity.astype(np.float64)])
    index = np.empty(2 * n, dtype=np.int32)
    value = np.empty(2 * n, dtype=np.float64)
    index[0::2] = rows
    index[1::2] = n_jobs + problem.gpu_type[cols]
    value[0::2] = 1.0
    value[1::2] = problem.gpus[cols]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.arange(0, 2 * n + 1, 2, dtype=np.int32)
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    if time_limit_s is not None:
        h.setOptionValue("time_limit", float(time_limit_s))
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kTimeLimit:
        incumbent = None
        if h.getInfo().primal_solution_status == 2:  # feasible point available
            x = np.asarray(h.getSolution().col_value)
            incumbent = choice.copy()
            incumbent[rows[x > 0.5]] = cols[x > 0.5]
        raise HighsTimeLimit(incumbent)
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not solve the round's MILP: {h.modelStatusToString(status)}")
    x = np.asarray(h.getSolution().col_value)
    chosen = x > 0.5
    choice[rows[chosen]] = cols[chosen]
    return choice


class HighsTimeLimit(RuntimeError):
    """HiGHS hit its time limit; ``choice`` is its best feasible allocation then (None if it had none)."""

    def __init__(self, choice: IntArray | None) -> None:
        super().__init__("HiGHS stopped at its time limit")
        self.choice = choice


def solve_lp_max(
    cost: FloatArray,
    upper: FloatArray,
    col_rows: IntArray,
    col_coef: FloatArray,
    col_start: IntArray,
    row_upper: FloatArray,
) -> tuple[FloatArray, FloatArray] | None:
    """max cost·x s.t. A x ≤ row_upper, 0 ≤ x ≤ upper, A given column-wise (CSC: col_start, col_rows, col_coef).

    Returns (x, y) with y ≥ 0 the dual value of each row (objective gain per unit of its right-hand side), or
    None when HiGHS does not report an optimum."""
    n = len(cost)
    m = len(row_upper)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = m
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.ascontiguousarray(cost, dtype=np.float64)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.ascontiguousarray(upper, dtype=np.float64)
    lp.row_lower_ = np.full(m, -highspy.kHighsInf)
    lp.row_upper_ = np.ascontiguousarray(row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.ascontiguousarray(col_start, dtype=np.int32)
    lp.a_matrix_.index_ = np.ascontiguousarray(col_rows, dtype=np.int32)
    lp.a_matrix_.value_ = np.ascontiguousarray(col_coef, dtype=np.float64)
    # For LPs this small presolve and worker threads cost far more than they save (tens of ms on a busy 2-core
    # machine). HiGHS's thread scheduler is process-wide and fixed at its first run: if it already runs with more
    # threads (a MILP ran first), asking for one is an error, and the LP runs again with the default.
    h = None
    for threads in (1, None):
        h = _new_highs()
        h.setOptionValue("presolve", "off")
        if threads is not None:
            h.setOptionValue("threads", threads)
        h.passModel(lp)
        if h.run() != highspy.HighsStatus.kError:
            break
    assert h is not None
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    sol = h.getSolution()
    # The shadow price of a ≤ row in a maximisation is ≥ 0; HiGHS's sign convention for it has varied: take |y|.
    return np.asarray(sol.col_value, dtype=np.float64), np.abs(np.asarray(sol.row_dual, dtype=np.float64))


_quiet_once = False


def _new_highs() -> highspy.Highs:
    """A silent HiGHS instance. HiGHS prints a banner on the C level at its first construction in a process,
    before any option can be set; that one construction runs with stdout pointed at /dev/null."""
    global _quiet_once
    if _quiet_once:
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()  # type: ignore[no-untyped-call]
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _quiet_once = True
    h.setOptionValue("output_flag", False)
    return h
