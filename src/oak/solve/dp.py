"""Exact dynamic programmes for the multiple-choice knapsack with one capacity per GPU type.

State: GPUs used per type, a point of the lattice Π_t [0, R_t] (R_t: GPUs of type t), flattened in C order
(S = Π(R_t + 1) states). A profile f[s] is the best value using at most the GPUs of state s.

Two engines, the same optimum (ties may be broken differently):

* **merge tree** (:func:`solve_dp_tree`, small S): every job's own profile is built at once, then profiles are
  merged pairwise, level by level, by max-plus convolution over the lattice (h[s] = max_{a ≤ s} f[a] + g[s − a])
  — log2(J) vectorised steps instead of J sequential ones. Cost O(J·S²) work in O(log J) NumPy calls: tens of
  microseconds at the paper's 12 GPUs.
* **sequential** (:func:`solve_dp_sequential`): one job after another, f ← max(f, max_j shift_j(f) + v_ij) with
  shifted slices; cost O(J·C·S), for state spaces up to a few hundred thousand states.
"""

from __future__ import annotations

import functools

import numpy as np

from oak.model.snapshot import FloatArray, IntArray
from oak.solve.assignment import AssignmentProblem, use_kernel

#: The merge tree is used while S² × jobs (the elements of its merge tensors, all levels together) stays below this.
TREE_MAX_WORK = 100_000


def tree_work(problem: AssignmentProblem) -> float:
    """Elements the merge tree's tensors hold over all levels: S² × jobs (S: lattice states)."""
    states = float(np.prod(problem.capacity.astype(np.float64) + 1.0))
    return states * states * max(problem.num_jobs, 1)


def solve_dp(problem: AssignmentProblem) -> IntArray:
    """Optimal choice per job (−1 = none): the merge tree when it is cheap (see ``TREE_MAX_WORK``), else the
    sequential programme."""
    if tree_work(problem) <= TREE_MAX_WORK:
        return solve_dp_tree(problem)
    return solve_dp_sequential(problem)


@functools.lru_cache(maxsize=32)
def _tree_tables(capacity: tuple[int, ...]) -> tuple[IntArray, IntArray]:
    """For the lattice of ``capacity``: usage (S, T) of every flat state, and the (S, S) table [a, s] of the flat
    state s − a where a ≤ s componentwise, S (a −inf sentinel row) elsewhere. Cached: capacities rarely change."""
    dims = [c + 1 for c in capacity]
    n_states = int(np.prod(dims))
    usage = np.stack(np.unravel_index(np.arange(n_states), dims), axis=1).astype(np.int64)
    ok = np.all(usage[None, :, :] >= usage[:, None, :], axis=2)  # [a, s]: a ≤ s
    flat_diff = np.arange(n_states)[None, :] - np.arange(n_states)[:, None]
    rest = np.where(ok, flat_diff, n_states).astype(np.int64)
    usage.setflags(write=False)
    rest.setflags(write=False)
    return usage, rest


def solve_dp_tree(problem: AssignmentProblem, engine: str = "auto") -> IntArray:
    """Optimal choice per job (−1 = none) by the merge tree. Ties: a job left unallocated first, then the
    configuration of lowest index; between the two halves of a merge, the smaller share to the left half.

    Profiles are laid out state-major, (S + 1, nodes) with a trailing −inf row for the table's sentinel, so that
    every reduction runs over the leading axis; the tree is padded with empty jobs to a power of two.

    ``engine``: ``numpy``, ``numba`` (:mod:`oak.solve.tree_kernel`, the same choice bit for bit) or ``auto``:
    numba once that kernel is loaded in this process (:func:`oak.solve.assignment.load_kernels`)."""
    n_jobs = problem.num_jobs
    if n_jobs == 0:
        return np.full(0, -1, dtype=np.int64)
    usage, rest = _tree_tables(tuple(int(c) for c in problem.capacity))
    if use_kernel(engine, False, "tree_kernel"):
        from oak.solve.tree_kernel import tree_choice

        choice = tree_choice(problem.value, problem.valid, problem.gpus, problem.gpu_type, usage, rest)
        if choice is not None:
            return choice
    n_states = len(usage)
    width = 1 << max(n_jobs - 1, 0).bit_length()
    fits = problem.gpus[:, None] <= usage[:, problem.gpu_type].T  # (C, S)
    gain = np.where(problem.valid & (problem.value > 0.0), problem.value, 0.0).T  # (C, J), ≥ 0
    cand = fits[:, :, None] * gain[:, None, :]  # (C, S, J): 0 where a configuration does not fit
    f = np.zeros((n_states + 1, width))
    f[n_states] = -np.inf
    cand.max(axis=0, out=f[:n_states, :n_jobs])
    leaf_choice = np.where(f[:n_states, :n_jobs] > 0.0, cand.argmax(axis=0), -1)  # (S, J)
    levels: list[IntArray] = []
    while f.shape[1] > 1:
        total = f[:n_states, None, 0::2] + f[rest, 1::2]  # (a, s, n): left half gets a, right half s − a
        levels.append(total.argmax(axis=0))
        f = np.empty((n_states + 1, total.shape[2]))
        f[n_states] = -np.inf
        total.max(axis=0, out=f[:n_states])
    state = np.array([n_states - 1], dtype=np.int64)
    for split in reversed(levels):
        a = split[state, np.arange(len(state))]
        nxt = np.empty(2 * len(state), dtype=np.int64)
        nxt[0::2] = a
        nxt[1::2] = state - a
        state = nxt
    return np.asarray(leaf_choice[state[:n_jobs], np.arange(n_jobs)], dtype=np.int64)


def solve_dp_sequential(problem: AssignmentProblem) -> IntArray:
    """Optimal choice per job (−1 = none), one job after another over the dense state array.

    Ties keep the earlier decision (leaving a job unallocated first, then the configuration of lowest index).
    Backtracking recomputes each step's winner from the stored profiles instead of storing decisions."""
    cap = tuple(int(c) + 1 for c in problem.capacity)
    n_jobs = problem.num_jobs
    f = np.zeros(cap, dtype=np.float64)
    history: list[FloatArray | None] = []
    options: list[IntArray] = []
    for i in range(n_jobs):
        cols = _useful_configs(problem, i)
        options.append(cols)
        if len(cols) == 0:
            history.append(None)
            continue
        history.append(f)
        new = f.copy()
        for j in cols:
            t = int(problem.gpu_type[j])
            w = int(problem.gpus[j])
            src_sl = [slice(None)] * len(cap)
            dst_sl = [slice(None)] * len(cap)
            src_sl[t] = slice(0, cap[t] - w)
            dst_sl[t] = slice(w, cap[t])
            view = new[tuple(dst_sl)]
            np.maximum(view, f[tuple(src_sl)] + problem.value[i, j], out=view)
        f = new
    choice = np.full(n_jobs, -1, dtype=np.int64)
    state = [c - 1 for c in cap]
    target = float(f[tuple(state)])
    for i in range(n_jobs - 1, -1, -1):
        prev = history[i]
        if prev is None:
            continue
        if prev[tuple(state)] == target:
            continue  # leaving job i unallocated reaches the same value
        for j in options[i]:
            t = int(problem.gpu_type[j])
            w = int(problem.gpus[j])
            if state[t] < w:
                continue
            src = list(state)
            src[t] -= w
            if prev[tuple(src)] + problem.value[i, j] == target:
                choice[i] = int(j)
                state = src
                target = float(prev[tuple(src)])
                break
        else:  # pragma: no cover - the forward pass guarantees a winner
            raise AssertionError("dynamic programme: no decision reproduces the stored value")
    return choice


def _useful_configs(problem: AssignmentProblem, i: int) -> IntArray:
    """Job i's valid configurations worth more than nothing and not dominated by a configuration of the same type
    with no more GPUs and at least the value (ties: the lower index stays), in index order."""
    fits = problem.gpus <= problem.capacity[problem.gpu_type]
    cols = np.flatnonzero(problem.valid[i] & (problem.value[i] > 0.0) & fits)
    if len(cols) <= 1:
        return cols
    t, w, v = problem.gpu_type[cols], problem.gpus[cols], problem.value[i, cols]
    dominated = (
        (t[:, None] == t[None, :])
        & (w[None, :] <= w[:, None])
        & (v[None, :] >= v[:, None])
        & ((w[None, :] < w[:, None]) | (v[None, :] > v[:, None]) | (cols[None, :] < cols[:, None]))
    )
    return np.asarray(cols[~dominated.any(axis=1)], dtype=np.int64)
