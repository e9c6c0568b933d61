"""The per-round MILP solved exactly with HiGHS (``highspy``), built column-wise in one call."""

from __future__ import annotations

import os
import sys

import highspy
import numpy as np

from oak.model.snapshot import IntArray
from oak.solve.assignment import AssignmentProblem


def solve_highs(problem: AssignmentProblem) -> IntArray:
    """Optimal choice per job (−1 = none) from HiGHS's branch and bound (default gap settings tightened)."""
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
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS did not solve the round's MILP: {h.modelStatusToString(status)}")
    x = np.asarray(h.getSolution().col_value)
    chosen = x > 0.5
    choice[rows[chosen]] = cols[chosen]
    return choice


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
