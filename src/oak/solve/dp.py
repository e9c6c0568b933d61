"""Exact dynamic programme for the multiple-choice knapsack with one capacity per GPU type.

State: GPUs used per type (a dense array of shape Π(capacity_t + 1)); f[c] = best value with usage ≤ c.
Cost O(J · C · Π(capacity_t + 1)) vectorised over the state array: microseconds at paper scale.
"""

from __future__ import annotations

import numpy as np

from oak.model.snapshot import IntArray
from oak.solve.assignment import AssignmentProblem


def solve_dp(problem: AssignmentProblem) -> IntArray:
    """Optimal choice per job (−1 = none). Ties keep the earlier decision (leaving a job unallocated first)."""
    cap = tuple(int(c) + 1 for c in problem.capacity)
    n_jobs = problem.num_jobs
    f = np.zeros(cap, dtype=np.float64)
    decisions: list[tuple[IntArray, list[int]] | None] = []
    for i in range(n_jobs):
        cols = [int(j) for j in np.flatnonzero(problem.valid[i] & (problem.value[i] > 0.0))]
        if not cols:
            decisions.append(None)
            continue
        new = f.copy()
        pick = np.full(cap, -1, dtype=np.int64)
        for j in cols:
            t = int(problem.gpu_type[j])
            w = int(problem.gpus[j])
            if w >= cap[t]:
                continue
            src = [slice(None)] * len(cap)
            dst = [slice(None)] * len(cap)
            src[t] = slice(0, cap[t] - w)
            dst[t] = slice(w, cap[t])
            cand = f[tuple(src)] + problem.value[i, j]
            view = new[tuple(dst)]
            better = cand > view
            view[better] = cand[better]
            pick[tuple(dst)][better] = j
        decisions.append((pick, cols))
        f = new
    choice = np.full(n_jobs, -1, dtype=np.int64)
    state = [c - 1 for c in cap]
    for i in range(n_jobs - 1, -1, -1):
        d = decisions[i]
        if d is None:
            continue
        j = int(d[0][tuple(state)])
        if j >= 0:
            choice[i] = j
            state[int(problem.gpu_type[j])] -= int(problem.gpus[j])
    return choice
