"""Lagrangian (per-GPU-type price) method for large rounds: a feasible allocation and a certified upper bound.

Relaxing the capacity constraints with prices λ_t ≥ 0 (value per GPU of type t) gives, for any λ, the bound

    L(λ) = Σ_t λ_t·R_t + Σ_i max(0, max_j (v_ij − λ_t(j)·w_j))  ≥  the optimum of the round's problem,

with R_t the GPUs of type t and w_j the GPUs of configuration j. L is convex and piecewise linear in only T
variables, and its minimum equals the bound of the LP relaxation. The method:

1. **Hulls** (:func:`build_hulls`). Per job and type, only the vertices of the upper concave hull of {(0, 0)} ∪
   {(w_j, v_ij)} can be a job's best response to some λ_t ≥ 0 (a point under a chord loses to an end of the chord
   at every price), and of these only the rising part. Andrew's monotone chain builds them for all (type, job)
   rows at once, one GPU count at a time. Along a hull the increments have falling slopes s_1 > s_2 > … (value
   per GPU).
2. **Prices** (:func:`minimise_dual`). Coordinate descent with an exact line search, started from the single
   price of the pooled cluster (:func:`common_price`): with the other prices fixed, job i's best option off type t
   is worth o_i ≥ 0, and its demand for type t at price λ is the sum of its hull increments k with λ < θ_ik =
   min(s_ik, λ*_i), where λ*_i = max_k (V_ik − o_i)/W_ik is the price above which it leaves the type. The exact
   minimiser over λ_t is the weighted quantile of the θ at which demand falls to R_t (the Dyer–Zemel/greedy
   solution of the single-type LP), found by sorting the thresholds near the previous price.
3. **LP polish** (:func:`lp_polish`). Coordinate descent can stall where jobs are torn between types. The LP
   relaxation is then solved exactly on a core (the jobs closest to a tie, all their hull points; every other job
   fixed at its best option) with HiGHS, adding the jobs that object to the new prices until none does: its duals
   are the optimal prices, and its solution, rounded, the starting allocation (at most ≈ T jobs are fractional).
4. **Primal** (:func:`repair`, :func:`improve`). Overloaded types give back their increments of least slope; a
   local search over the options the bound allows (reduced-cost filter) then adds, upgrades and switches jobs,
   single moves in batches and pairs of moves (one job frees GPUs that another takes), over all valid
   configurations, not only hull points.
5. **Bound.** L is evaluated exactly, on the full value matrix, at the final prices: a valid upper bound on the
   optimum whatever the quality of the price search.

Costs are O(J·C) for the hulls and the bound and O(J·H·T) per pass (H: hull points per job and type), all in
NumPy with no Python loop over jobs. Measured on the shared 2-core development machine (``oak bench decision``,
OAK-like random rounds, load average ≈ 5 from other work): ≈ 20–30 ms of CPU (30–80 ms wall) at 1,024 GPUs × 3
types × 1,000 jobs and ≈ 0.1 s of CPU (≈ 0.18 s wall) at 4,096 × 4 × 4,000, with certified gaps ≤ 1e-5.
:mod:`oak.solve.core` turns the certificate into a proof of optimality when few jobs are left open by it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import BoolArray, FloatArray, IntArray
from oak.solve.assignment import AssignmentProblem, dot, use_kernel

#: Passes of coordinate descent over the prices, at most.
MAX_PASSES = 60

#: Jobs in the first core of ``lp_polish`` (the ones closest to a tie between two options at the first prices).
CORE_JOBS = 64

#: ``build_hulls`` runs the compiled monotone chain (``oak.solve.hull_kernel``) above this many points (GPU counts ×
#: types × jobs); below, the NumPy loop costs less than loading numba.
KERNEL_MIN_POINTS = 2_000

#: Rounds of the local search, at most (each costs one vectorised scan of the core's options and applies a batch of
#: single moves or one pair).
MAX_MOVES = 400


@dataclass(frozen=True, eq=False)
class LagrangianResult:
    """choice: (J,) configuration per job (−1: none); objective: Σ chosen values; bound: L(λ) ≥ optimum (value
    units); prices: λ per GPU type (value per GPU); passes: coordinate-descent passes run."""

    choice: IntArray
    objective: float
    bound: float
    prices: FloatArray
    passes: int = 0

    @property
    def gap(self) -> float:
        """Certified relative optimality gap (bound − objective) / max(|bound|, 1e-12)."""
        return (self.bound - self.objective) / max(abs(self.bound), 1e-12)


def dual_value(problem: AssignmentProblem, prices: FloatArray) -> tuple[float, IntArray]:
    """L(λ) on the full value matrix, and each job's best configuration at these prices (−1 when no
    configuration has positive reduced value). Valid as an upper bound for any prices ≥ 0."""
    prices = np.asarray(prices, dtype=np.float64)
    reduced = np.where(
        problem.valid, problem.value - prices[problem.gpu_type][None, :] * problem.gpus[None, :], -np.inf
    )
    if reduced.shape[1] == 0:
        return float(dot(prices, problem.capacity)), np.full(reduced.shape[0], -1, dtype=np.int64)
    best = reduced.argmax(axis=1)
    top = reduced[np.arange(len(best)), best]
    chosen = np.where(top > 0, best, -1)
    return float(dot(prices, problem.capacity) + np.maximum(top, 0.0).sum()), chosen


@dataclass(frozen=True, eq=False)
class Hulls:
    """Per type t, hull point k and job i (layout (T, H, J)): ``gpus`` W (GPUs, 0 at k = 0), ``value`` V (value
    units, 0 at k = 0), ``config`` (configuration index, −1 at k = 0). Rows shorter than H repeat their last
    point. ``dw``/``slope``: (T, H−1, J) increments k−1 → k in GPUs and their value per GPU (−inf if empty)."""

    gpus: FloatArray
    value: FloatArray
    config: IntArray
    dw: FloatArray
    slope: FloatArray


def _grouped_points(problem: AssignmentProblem, engine: str = "numpy") -> tuple[FloatArray, FloatArray, IntArray]:
    """Each job's points per type and distinct GPU count: values (K, T, J), GPUs (K, T), configurations.

    Slot k = 0 is the origin (none: 0 GPUs, value 0, configuration −1); among configurations of one type with
    the same GPU count (e.g. different node shapes) the most valuable one (then the first) stands for the count.
    Unused slots hold −inf values and repeat the type's largest count. Configurations are (K, T) when every
    (type, count) has one configuration, else (K, T, J); then ``engine`` ``numba`` groups them compiled
    (:func:`oak.solve.hull_kernel.group_points`: the same arrays bit for bit)."""
    n_jobs = problem.num_jobs
    n_types = len(problem.capacity)
    first, order, starts, g_type, pos, k_max, pw = _point_slots(problem.gpus, problem.gpu_type, n_types)
    n_cfg = len(order)
    pc: IntArray
    if len(starts) < n_cfg and engine == "numba":
        from oak.solve.hull_kernel import group_points

        pv, pc = group_points(
            np.ascontiguousarray(problem.value, dtype=np.float64), np.ascontiguousarray(problem.valid), order,
            starts, pos, g_type, k_max, n_types,
        )  # fmt: skip
        return pv, pw.copy(), pc
    pv = np.full((k_max, n_types, n_jobs), -np.inf)
    pv[0] = 0.0
    masked = np.where(problem.valid, problem.value, -np.inf).T  # (C, J)
    if len(starts) == n_cfg:
        pv[pos, g_type] = masked[order]
        pc = np.full((k_max, n_types), -1, dtype=np.int64)
        pc[pos, g_type] = order
    else:
        masked = masked[order]
        group_value = np.maximum.reduceat(masked, starts, axis=0)
        group_of = np.cumsum(first) - 1
        hit = masked == group_value[group_of]
        idx = np.where(hit, order[:, None], np.iinfo(np.int64).max)
        pv[pos, g_type] = group_value
        pc = np.full((k_max, n_types, n_jobs), -1, dtype=np.int64)
        pc[pos, g_type] = np.minimum.reduceat(idx, starts, axis=0)
    return pv, pw.copy(), pc


#: The slots of the last few configuration sets (``_point_slots``): rounds of one cluster share theirs.
_SLOTS: dict[tuple[bytes, bytes, int], tuple[BoolArray, IntArray, IntArray, IntArray, IntArray, int, FloatArray]] = {}


def _point_slots(
    gpus_in: IntArray, gtype_in: IntArray, n_types: int
) -> tuple[BoolArray, IntArray, IntArray, IntArray, IntArray, int, FloatArray]:
    """Where each configuration's point goes in ``_grouped_points``: the configurations by (type, GPUs) (``order``),
    which start a (type, GPU count) group (``first``, ``starts``), each group's type and slot, the slots per type and
    the GPUs per slot (K, T; unused slots repeat the type's largest count). A function of the configurations alone,
    kept for the last few sets (arrays read only)."""
    gpus = np.asarray(gpus_in).astype(np.int64)
    gtype = np.asarray(gtype_in).astype(np.int64)
    key = (gpus.tobytes(), gtype.tobytes(), n_types)
    hit = _SLOTS.get(key)
    if hit is not None:
        return hit
    order = np.lexsort((gpus, gtype))
    t_sorted, w_sorted = gtype[order], gpus[order]
    n_cfg = len(order)
    first = np.ones(n_cfg, dtype=bool)
    if n_cfg > 1:
        first[1:] = (t_sorted[1:] != t_sorted[:-1]) | (w_sorted[1:] != w_sorted[:-1])
    starts = np.flatnonzero(first)
    g_type = t_sorted[starts]
    type_start = np.searchsorted(g_type, np.arange(n_types))
    pos = np.arange(len(starts)) - type_start[g_type] + 1
    k_max = int(pos.max(initial=0)) + 1
    pw = np.zeros((k_max, n_types))
    pw[pos, g_type] = w_sorted[starts]
    pw = np.maximum.accumulate(pw, axis=0)
    slots = (first, order, starts, g_type, pos, k_max, pw)
    for a in (first, order, starts, g_type, pos, pw):
        a.flags.writeable = False
    if len(_SLOTS) >= 8:
        _SLOTS.pop(next(iter(_SLOTS)))
    _SLOTS[key] = slots
    return slots


def build_hulls(problem: AssignmentProblem, engine: str = "auto") -> Hulls:
    """The rising part of the upper concave hull of each job's (GPUs, value) points per GPU type, origin included.

    Points not above every point to their left are dropped first; the rest go through Andrew's monotone chain,
    vectorised across all (type, job) rows: each point in turn pops from its row's stack the points that are not
    strictly above the chord from the point beneath them to it, then is pushed. ``engine``: ``numpy`` (the
    vectorised loop), ``numba`` (the rise, the chain and the gathering compiled as one pass,
    :func:`oak.solve.hull_kernel.hull_arrays`; the same hulls bit for bit) or ``auto``: numba when the rows hold more than ``KERNEL_MIN_POINTS`` points or the kernel is loaded
    (:func:`oak.solve.assignment.kernel_loaded`)."""
    n_jobs = problem.num_jobs
    n_types = len(problem.capacity)
    compiled = use_kernel(engine, problem.value.size > KERNEL_MIN_POINTS, "hull_kernel")
    pv, pw, pc = _grouped_points(problem, "numba" if compiled else "numpy")
    k_max = pv.shape[0]
    n_rows = n_types * n_jobs
    v_all = pv.reshape(k_max, n_rows)
    row_type = np.repeat(np.arange(n_types), n_jobs)  # row r = t·J + i
    if compiled or (engine == "auto" and k_max * n_rows > KERNEL_MIN_POINTS):
        from oak.solve.hull_kernel import hull_arrays

        pc_rows = pc[:, row_type] if pc.ndim == 2 else pc.reshape(k_max, n_rows)
        hv, hw, hc, dw, slope = hull_arrays(
            np.ascontiguousarray(v_all),
            np.ascontiguousarray(pw),
            np.ascontiguousarray(pc_rows),
            row_type,
            n_types,
            n_jobs,
        )
        return Hulls(gpus=hw, value=hv, config=hc, dw=dw, slope=slope)
    rising = np.zeros(v_all.shape, dtype=bool)
    rising[1:] = v_all[1:] > np.maximum.accumulate(v_all, axis=0)[:-1]
    stack, top = _hull_stacks_numpy(v_all, pw, row_type, rising)
    h = int(top.max(initial=0)) + 1
    cols = np.arange(n_rows)
    pick = np.where(np.arange(h)[:, None] <= top[None, :], stack[:h], stack[top, cols][None, :])
    hv = v_all[pick, cols[None, :]]
    hw = pw[pick, row_type[None, :]]
    hc = pc[pick, row_type[None, :]] if pc.ndim == 2 else pc.reshape(k_max, n_rows)[pick, cols[None, :]]

    def per_type(a: np.ndarray) -> np.ndarray:
        return a.reshape(h, n_types, n_jobs).transpose(1, 0, 2).copy()

    hv, hw, hc = per_type(hv), per_type(hw), per_type(hc)
    dw = np.diff(hw, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(dw > 0, np.diff(hv, axis=1) / np.where(dw > 0, dw, 1.0), -np.inf)
    return Hulls(gpus=hw, value=hv, config=hc, dw=dw, slope=slope)


def _hull_stacks_numpy(
    v_all: FloatArray, pw: FloatArray, row_type: IntArray, rising: BoolArray
) -> tuple[IntArray, IntArray]:
    """The monotone chain vectorised across rows: (stack (K, R) of point indices, top (R,))."""
    k_max, n_rows = v_all.shape
    stack = np.zeros((k_max, n_rows), dtype=np.int64)  # stack[0] = 0: the origin
    top = np.zeros(n_rows, dtype=np.int64)  # index of each row's top of stack
    # Coordinates of the two topmost stack points (1: top, 0: beneath it; NaN where there is none).
    v1 = np.zeros(n_rows)
    w1 = np.zeros(n_rows)
    v0 = np.full(n_rows, np.nan)
    w0 = np.full(n_rows, np.nan)
    with np.errstate(invalid="ignore"):
        for k in range(1, k_max):
            live = rising[k]
            if not live.any():
                continue
            vk = v_all[k]
            wk = pw[k][row_type]
            # pop the top while it is not strictly above the chord from the point beneath it to point k
            pop = np.flatnonzero(live & (top >= 1) & ((v1 - v0) * (wk - w1) <= (vk - v1) * (w1 - w0)))
            while len(pop):
                top[pop] -= 1
                v1[pop] = v0[pop]
                w1[pop] = w0[pop]
                beneath = top[pop] - 1
                has = beneath >= 0
                j = stack[np.maximum(beneath, 0), pop]
                v0[pop] = np.where(has, v_all[j, pop], np.nan)
                w0[pop] = np.where(has, pw[j, row_type[pop]], np.nan)
                pop = pop[has]
                a, b, c, d = v1[pop], w1[pop], v0[pop], w0[pop]
                pop = pop[(a - c) * (wk[pop] - b) <= (vk[pop] - a) * (b - d)]
            rows = np.flatnonzero(live)
            top[rows] += 1
            stack[top[rows], rows] = k
            v0 = np.where(live, v1, v0)
            w0 = np.where(live, w1, w0)
            v1 = np.where(live, vk, v1)
            w1 = np.where(live, wk, w1)
    return stack, top


def _cut(theta: FloatArray, weight: FloatArray, capacity: float, guess: float | None) -> float:
    """Smallest λ ≥ 0 with Σ weight[θ > λ] ≤ capacity (the weighted quantile of the thresholds θ > 0).

    With a ``guess`` only the thresholds in a window around it are sorted, when the answer lies there."""
    if float(weight.sum()) <= capacity:
        return 0.0
    if guess is not None and guess > 0.0:
        for width in (1e-3, 3e-2):
            lo, hi = guess * (1.0 - width), guess * (1.0 + width)
            above = float(weight[theta > hi].sum())
            if above > capacity:
                continue
            window = (theta > lo) & (theta <= hi)
            tw = theta[window]
            ww = weight[window]
            if above + float(ww.sum()) <= capacity:
                continue
            order = np.argsort(-tw, kind="stable")
            m = int(np.searchsorted(above + np.cumsum(ww[order]), capacity, side="right"))
            return float(tw[order[m]])
    order = np.argsort(-theta, kind="stable")
    m = int(np.searchsorted(np.cumsum(weight[order]), capacity, side="right"))
    return float(theta[order[m]])


def _line_search(hulls: Hulls, t: int, outside: FloatArray, capacity: float, guess: float | None) -> float:
    """Exact minimiser over λ_t ≥ 0 of λ_t·R_t + Σ_i max(o_i, max_k (V_ik − λ_t·W_ik)) (other prices fixed)."""
    w = hulls.gpus[t, 1:, :]
    v = hulls.value[t, 1:, :]
    if w.size == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        leave = np.where(w > 0, (v - outside[None, :]) / np.where(w > 0, w, 1.0), -np.inf).max(axis=0)
    theta = np.minimum(hulls.slope[t], leave[None, :])
    live = (theta > 0) & (hulls.dw[t] > 0)
    return _cut(theta[live], hulls.dw[t][live], capacity, guess)


def _best_per_type(hulls: Hulls, prices: FloatArray) -> FloatArray:
    """(T, J): each job's best reduced value max_k (V − λ_t·W) per type (≥ 0, the origin being a hull point)."""
    return np.asarray((hulls.value - prices[:, None, None] * hulls.gpus).max(axis=1), dtype=np.float64)


def common_price(problem: AssignmentProblem) -> float:
    """The optimal single price (value per GPU) when all GPU types are pooled into one of their total capacity:
    a good start for the per-type prices, which stay close to it when jobs can run on several types."""
    pooled = AssignmentProblem(
        problem.value,
        problem.valid,
        problem.gpus,
        np.zeros_like(problem.gpu_type),
        np.array([int(problem.capacity.sum())], dtype=np.int64),
    )
    lam, _ = minimise_dual(build_hulls(pooled), pooled.capacity.astype(np.float64), max_passes=1)
    return float(lam[0])


def minimise_dual(
    hulls: Hulls,
    capacity: FloatArray,
    prices: FloatArray | None = None,
    max_passes: int = MAX_PASSES,
    rel_tol: float = 1e-9,
    warm: bool = False,
    engine: str = "auto",
) -> tuple[FloatArray, int]:
    """Prices λ ≥ 0 lowering L by coordinate descent with exact line searches, until a pass gains less than
    ``rel_tol`` relatively; returns (λ, passes run). Coordinate descent can stall at a kink where jobs are torn
    between types; ``lp_polish`` finishes from there. ``warm``: ``prices`` are near the answer (the previous
    round's), so each line search first sorts only the thresholds near them. ``engine``: ``numpy``, ``numba``
    (the same search compiled, :mod:`oak.solve.price_kernel`: the same prices and passes) or ``auto``: numba
    above ``KERNEL_MIN_POINTS`` hull points or once the kernel is loaded."""
    n_types = hulls.value.shape[0]
    if use_kernel(engine, hulls.value.size > KERNEL_MIN_POINTS, "price_kernel"):
        from oak.solve.price_kernel import minimise_dual_kernel

        start = np.zeros(n_types) if prices is None else np.asarray(prices, dtype=np.float64)
        lam_k, passes_k = minimise_dual_kernel(
            hulls.value, hulls.gpus, hulls.slope, hulls.dw, np.asarray(capacity, dtype=np.float64),
            start, int(max_passes), float(rel_tol),
        )  # fmt: skip
        return np.asarray(lam_k, dtype=np.float64), int(passes_k)
    lam = np.zeros(n_types) if prices is None else np.asarray(prices, dtype=np.float64).copy()
    best = _best_per_type(hulls, lam)
    value = float(dot(lam, capacity) + best.max(axis=0).sum())
    passes = 0
    guesses: list[float | None] = [float(x) for x in lam] if warm else [None] * n_types
    for passes in range(1, max_passes + 1):  # noqa: B007 - the count is returned
        before = value
        for t in range(n_types):
            others = np.delete(best, t, axis=0).max(axis=0) if n_types > 1 else np.zeros(best.shape[1])
            lam[t] = _line_search(hulls, t, others, float(capacity[t]), guesses[t])
            guesses[t] = lam[t]
            best[t] = (hulls.value[t] - lam[t] * hulls.gpus[t]).max(axis=0)
        value = float(dot(lam, capacity) + best.max(axis=0).sum())
        if n_types == 1 or before - value <= rel_tol * max(abs(value), 1.0):
            break
    return lam, passes


@dataclass(frozen=True, eq=False)
class LPPoint:
    """``lp_polish``'s result: ``prices`` (T,) value per GPU; ``choice`` (J,) the LP solution rounded to one
    configuration per job (−1: none); ``core`` the jobs solved as rows and ``weights`` (T·H + 1, len(core)) their
    LP weight per hull option, none first."""

    prices: FloatArray
    choice: IntArray
    core: IntArray
    weights: FloatArray


def lp_polish(
    hulls: Hulls,
    capacity: FloatArray,
    prices: FloatArray,
    core_jobs: int = CORE_JOBS,
    rounds: int = 10,
) -> LPPoint | None:
    """Exact LP prices near ``prices``, and the LP solution rounded to one option per job; None if HiGHS fails.

    The LP relaxation is solved on a core: the ``core_jobs`` jobs whose best and second-best options at
    ``prices`` are closest, with all their hull points as columns; every other job is fixed at its best option
    (its GPUs leave the capacities). Jobs that prefer another option at the LP's prices join the core and the LP
    is solved again (column generation), as when the fixed jobs overfill a type; when no job objects, the
    prices are those of the full LP's optimum. None when ``rounds`` run out first (any prices ≥ 0 would still give
    a valid bound, but the caller keeps its own)."""
    from oak.solve.highs import solve_lp_max

    n_types, h, n_jobs = hulls.value.shape
    n_opt = n_types * h
    real = np.zeros((n_types, h, n_jobs), dtype=bool)
    real[:, 1:, :] = hulls.dw > 0
    real_f = real.reshape(n_opt, n_jobs)
    value_f = hulls.value.reshape(n_opt, n_jobs)
    gpus_f = hulls.gpus.reshape(n_opt, n_jobs)
    opt_type = np.repeat(np.arange(n_types), h)
    jobs = np.arange(n_jobs)

    def reduced(lam: FloatArray) -> FloatArray:
        red = np.where(real_f, value_f - lam[opt_type][:, None] * gpus_f, -np.inf)
        return np.vstack([red, np.zeros((1, n_jobs))])  # last row: none

    ext = reduced(prices)
    fixed_opt = ext.argmax(axis=0)  # n_opt: none
    top2 = -np.partition(-ext, 1, axis=0)[:2]
    gap = np.where(real_f.any(axis=0), top2[0] - top2[1], np.inf)
    n_live = int(np.isfinite(gap).sum())
    in_core = gap <= np.partition(gap, core_jobs - 1)[core_jobs - 1] if n_live > core_jobs else np.isfinite(gap)
    scale = max(1.0, float(np.abs(value_f[real_f]).max(initial=0.0)))
    for _ in range(rounds):
        fixed = np.flatnonzero(~in_core & (fixed_opt < n_opt))
        used = np.bincount(opt_type[fixed_opt[fixed]], weights=gpus_f[fixed_opt[fixed], fixed], minlength=n_types)
        rest = capacity - used
        if np.any(rest < 0):
            # The fixed jobs overfill a type: free the ones on it closest to a tie and retry.
            over = np.isin(opt_type[np.minimum(fixed_opt, n_opt - 1)], np.flatnonzero(rest < 0)) & ~in_core
            over &= fixed_opt < n_opt
            cand = np.flatnonzero(over)
            # stable: which of equally close jobs are freed must not depend on the CPU's SIMD sort
            in_core[cand[np.argsort(gap[cand], kind="stable")[: max(core_jobs, len(cand) // 2)]]] = True
            continue
        core = np.flatnonzero(in_core)
        n_core = len(core)
        o_idx, c_pos = np.nonzero(real_f[:, core])
        c_job = core[c_pos]
        n_c = len(c_job)
        if n_c == 0:
            lam = np.zeros(n_types)
            x = np.zeros(0)
        else:
            col_rows = np.empty(2 * n_c, dtype=np.int64)
            col_coef = np.empty(2 * n_c)
            col_rows[0::2] = c_pos
            col_rows[1::2] = n_core + opt_type[o_idx]
            col_coef[0::2] = 1.0
            col_coef[1::2] = gpus_f[o_idx, c_job]
            solved = solve_lp_max(
                value_f[o_idx, c_job],
                np.ones(n_c),
                col_rows,
                col_coef,
                np.arange(0, 2 * n_c + 1, 2),
                np.concatenate([np.ones(n_core), rest]),
            )
            if solved is None:
                return None
            x, y = solved
            lam = y[n_core:]
        ext_new = reduced(lam)
        held = ext_new[fixed_opt, jobs]
        excess = np.where(in_core, 0.0, ext_new.max(axis=0) - held)
        violated = np.flatnonzero(excess > 1e-12 * scale)
        if len(violated) == 0:
            break
        if len(violated) > core_jobs:  # the most violated first, to keep the LP small
            # a stable sort, not argpartition: ties go to the lower job index on every CPU
            violated = violated[np.argsort(-excess[violated], kind="stable")[:core_jobs]]
        in_core[violated] = True
    else:
        return None
    # Rounding: a core job takes its option of largest weight (none first on ties), the others stay fixed.
    choice = np.full(n_jobs, -1, dtype=np.int64)
    fixed = np.flatnonzero(~in_core & (fixed_opt < n_opt))
    t_f, k_f = np.divmod(fixed_opt[fixed], h)
    choice[fixed] = hulls.config[t_f, k_f, fixed]
    weights = np.zeros((n_opt + 1, n_core))
    if n_core:
        weights[o_idx + 1, c_pos] = x
        weights[0] = np.maximum(1.0 - weights[1:].sum(axis=0), 0.0)
        pick = weights.argmax(axis=0) - 1  # −1: none
        t_c, k_c = np.divmod(np.maximum(pick, 0), h)
        choice[core] = np.where(pick >= 0, hulls.config[t_c, k_c, core], -1)
    return LPPoint(prices=lam, choice=choice, core=core, weights=weights)


def _usage(problem: AssignmentProblem, choice: IntArray) -> IntArray:
    used = np.zeros(len(problem.capacity), dtype=np.int64)
    rows = choice >= 0
    np.add.at(used, problem.gpu_type[choice[rows]], problem.gpus[choice[rows]])
    return used


def primal_at(hulls: Hulls, prices: FloatArray) -> IntArray:
    """Each job's best hull configuration at these prices (−1: none); ties go to fewer GPUs and earlier types."""
    reduced = hulls.value - prices[:, None, None] * hulls.gpus  # (T, H, J)
    n_types, h, n_jobs = reduced.shape
    flat = reduced.reshape(n_types * h, n_jobs)
    # Among the candidates of greatest reduced value, the fewest GPUs, then the first (type, point): the key
    # GPUs·(T·H) + index is exact in float64 (whole GPU counts, small indices) and orders as a stable sort by GPUs.
    top = flat == flat.max(axis=0)
    rank = (
        hulls.gpus.reshape(n_types * h, n_jobs) * float(n_types * h) + np.arange(n_types * h, dtype=np.float64)[:, None]
    )
    pick = np.where(top, rank, np.inf).argmin(axis=0)
    t_pick, k_pick = np.divmod(pick, h)
    config = hulls.config[t_pick, k_pick, np.arange(n_jobs)]
    return config.astype(np.int64)


def repair(problem: AssignmentProblem, hulls: Hulls, choice: IntArray, engine: str = "auto") -> IntArray:
    """Bring every type within capacity by giving back hull increments of least slope (value per GPU) first;
    a job on a non-hull configuration is dropped whole. Vectorised per type.

    ``engine``: ``numpy`` (below), ``numba`` (:mod:`oak.solve.repair_kernel`: the same allocation bit for bit) or
    ``auto``: numba above ``KERNEL_MIN_POINTS`` options or once the kernel is loaded."""
    if use_kernel(engine, problem.value.size > KERNEL_MIN_POINTS, "repair_kernel"):
        from oak.solve.repair_kernel import repair_kernel

        fixed: IntArray = repair_kernel(
            np.ascontiguousarray(problem.value, dtype=np.float64), problem.gpus.astype(np.int64),
            problem.gpu_type.astype(np.int64), problem.capacity.astype(np.int64), hulls.config, hulls.dw,
            hulls.slope, np.asarray(choice, dtype=np.int64),
        )  # fmt: skip
        return fixed
    choice = choice.copy()
    used = _usage(problem, choice)
    for t in np.flatnonzero(used > problem.capacity):
        rows = np.flatnonzero((choice >= 0) & (problem.gpu_type[np.maximum(choice, 0)] == t))
        cfg_t = hulls.config[t][:, rows]  # (H, n)
        on_hull = cfg_t == choice[rows][None, :]
        level = np.where(on_hull.any(axis=0), on_hull.argmax(axis=0), -1)  # hull index of the chosen point
        h = cfg_t.shape[0]
        k = np.arange(1, h)[:, None]
        held = (k <= level[None, :]) & (hulls.dw[t][:, rows] > 0)  # increments the job holds now
        slope = np.where(held, hulls.slope[t][:, rows], np.inf)
        dw = np.where(held, hulls.dw[t][:, rows], 0.0)
        # A job off the hull gives back all its GPUs at once, at its average value per GPU.
        off = level < 0
        if off.any():
            avg = problem.value[rows[off], choice[rows[off]]] / problem.gpus[choice[rows[off]]]
            extra_slope = np.full(len(rows), np.inf)
            extra_slope[off] = avg
            extra_dw = np.zeros(len(rows))
            extra_dw[off] = problem.gpus[choice[rows[off]]]
            slope = np.vstack([slope, extra_slope[None, :]])
            dw = np.vstack([dw, extra_dw[None, :]])
        flat_slope = slope.ravel()
        flat_dw = dw.ravel()
        order = np.argsort(flat_slope, kind="stable")
        excess = float(used[t] - problem.capacity[t])
        m = int(np.searchsorted(np.cumsum(flat_dw[order]), excess, side="left")) + 1
        give_flat = np.zeros(flat_slope.shape, dtype=bool)
        give_flat[order[:m]] = True
        give = give_flat.reshape(slope.shape)
        n_inc = h - 1
        drop_whole = give[n_inc, :] if off.any() else np.zeros(len(rows), dtype=bool)
        # Increments given back per job form a suffix of those held (slopes fall along the hull).
        kept_level = np.where(level >= 0, level - give[:n_inc, :].sum(axis=0), -1)
        new = hulls.config[t][np.clip(kept_level, 0, h - 1), rows]
        new = np.where(drop_whole | (kept_level < 0), -1, new)
        choice[rows] = new
    return choice


def improve(
    problem: AssignmentProblem,
    choice: IntArray,
    prices: FloatArray,
    bound: float,
    max_moves: int = MAX_MOVES,
    engine: str = "auto",
) -> IntArray:
    """Local search from a feasible ``choice`` until no improving move is left (or after ``max_moves`` rounds).

    Reduced-cost filter: with λ ≥ 0, L(λ) − value(x) = Σ_i δ_i(x_i) + Σ_t λ_t·slack_t(x), where δ_i(o) ≥ 0 is the
    reduced value job i gives up by taking option o instead of its best one at λ. A solution better than the
    incumbent therefore uses only options with δ < L(λ) − incumbent: only those (the "core") are searched.

    Moves, best first: single jobs take core options that fit the free GPUs (ranked by reduced gain, gain − Σ_t
    λ_t·extra GPUs, so that leftover GPUs go where the LP would put them; applied in batches, see
    ``_batch_singles``); when none is left, a pair: one job gives GPUs of a type back (downgrade, drop or switch
    away) so that another fits an option needing more than is free.

    ``engine``: ``numpy`` (below), ``numba`` (the same search compiled, :mod:`oak.solve.improve_kernel`: the same
    allocation bit for bit) or ``auto``: numba above ``KERNEL_MIN_POINTS`` options or once the kernel is loaded.
    """
    choice = choice.copy()
    n_jobs = len(choice)
    if n_jobs == 0 or problem.value.shape[1] == 0:
        return choice
    gpus = problem.gpus.astype(np.int64)
    gtype = problem.gpu_type.astype(np.int64)
    n_types = len(problem.capacity)
    if use_kernel(engine, problem.value.size > KERNEL_MIN_POINTS, "improve_kernel"):
        from oak.solve.improve_kernel import improve_kernel

        free0 = (problem.capacity - _usage(problem, choice)).astype(np.int64)
        out = improve_kernel(
            np.ascontiguousarray(problem.value, dtype=np.float64),
            np.ascontiguousarray(problem.valid, dtype=np.bool_),
            gpus,
            gtype,
            n_types,
            np.asarray(prices, dtype=np.float64),
            float(bound),
            choice.astype(np.int64),
            free0,
            int(max_moves),
        )
        return np.asarray(out, dtype=np.int64)
    red = np.where(problem.valid, problem.value - prices[gtype][None, :] * gpus[None, :], -np.inf)
    best = np.maximum(red.max(axis=1), 0.0)
    has = choice >= 0
    safe = np.maximum(choice, 0)
    cur_v = np.where(has, problem.value[np.arange(n_jobs), safe], 0.0)
    cur_w = np.where(has, gpus[safe], 0)
    cur_t = np.where(has, gtype[safe], -1)
    free = (problem.capacity - _usage(problem, choice)).astype(np.int64)
    tol = 1e-9 * max(1.0, abs(bound))
    slack = bound - float(cur_v.sum())
    # Core options (δ ≤ slack), "none" included as configuration −1.
    ci, cj = np.nonzero(problem.valid & (best[:, None] - red <= slack + tol))
    none_rows = np.flatnonzero(best <= slack + tol)
    ci = np.concatenate([ci, none_rows])
    cj = np.concatenate([cj, np.full(len(none_rows), -1, dtype=np.int64)])
    cdelta = best[ci] - np.where(cj >= 0, red[ci, np.maximum(cj, 0)], 0.0)
    cv = np.where(cj >= 0, problem.value[ci, np.maximum(cj, 0)], 0.0)
    cw = np.where(cj >= 0, gpus[np.maximum(cj, 0)], 0)
    ct = np.where(cj >= 0, gtype[np.maximum(cj, 0)], -1)
    span = int(gpus.max(initial=0))
    d_index = np.arange(span + 1)
    for _ in range(max_moves):
        if slack <= tol or len(ci) == 0:
            break
        same = (ct == cur_t[ci]) & (ct >= 0)
        take = np.where(ct >= 0, cw - np.where(same, cur_w[ci], 0), 0)  # GPUs of type ct needed (< 0: freed)
        gain = cv - cur_v[ci]
        free_ct = free[np.maximum(ct, 0)]
        single = (gain > tol) & ((ct < 0) | (take <= free_ct))
        if single.any():
            released = np.where((cur_t[ci] >= 0) & ~same, prices[np.maximum(cur_t[ci], 0)] * cur_w[ci], 0.0)
            score = gain - np.where(ct >= 0, prices[np.maximum(ct, 0)] * take, 0.0) + released
            moves = _batch_singles(ci, cj, ct, take, score, single, free, n_types)
        else:
            moves = _best_pair(ci, cj, ct, cw, cur_t, cur_w, take, gain, free, span, d_index, n_types, tol)
            if not moves:
                break
        for i, j in moves:
            if cur_t[i] >= 0:
                free[cur_t[i]] += cur_w[i]
            if j >= 0:
                free[gtype[j]] -= gpus[j]
            choice[i] = j
            cur_v[i] = problem.value[i, j] if j >= 0 else 0.0
            cur_w[i] = gpus[j] if j >= 0 else 0
            cur_t[i] = gtype[j] if j >= 0 else -1
        if np.any(free < 0):  # cannot happen: every move is checked; kept as a guard for the invariant
            raise AssertionError("local search broke a capacity")
        slack = bound - float(cur_v.sum())
        keep = cdelta <= slack + tol
        if not keep.all():
            ci, cj, cdelta, cv, cw, ct = ci[keep], cj[keep], cdelta[keep], cv[keep], cw[keep], ct[keep]
    return choice


def _batch_singles(
    ci: IntArray,
    cj: IntArray,
    ct: IntArray,
    take: IntArray,
    score: FloatArray,
    single: BoolArray,
    free: IntArray,
    n_types: int,
) -> list[tuple[int, int]]:
    """Improving single moves to apply together: each job's best-scored one, then per GPU type the best-scored
    moves while their GPUs fit what is free (GPUs a move releases elsewhere are not counted on: safe)."""
    idx = np.flatnonzero(single)
    order = idx[np.lexsort((-score[idx], ci[idx]))]
    first = np.ones(len(order), dtype=bool)
    first[1:] = ci[order[1:]] != ci[order[:-1]]
    per_job = order[first]
    per_job = per_job[np.argsort(-score[per_job], kind="stable")]
    need = np.maximum(take[per_job], 0)
    kind = ct[per_job]
    ok = np.ones(len(per_job), dtype=bool)
    for t in range(n_types):
        on_t = np.flatnonzero(kind == t)
        ok[on_t] = np.cumsum(need[on_t]) <= free[t]
    chosen = per_job[ok]
    if len(chosen) == 0:  # the best move alone always fits
        chosen = per_job[:1]
    return [(int(ci[m]), int(cj[m])) for m in chosen]


def _best_pair(
    ci: IntArray,
    cj: IntArray,
    ct: IntArray,
    cw: IntArray,
    cur_t: IntArray,
    cur_w: IntArray,
    take: IntArray,
    gain: FloatArray,
    free: IntArray,
    span: int,
    d_index: IntArray,
    n_types: int,
    tol: float,
) -> list[tuple[int, int]]:
    """The best improving pair of moves (as [(job, configuration), (job, configuration)]) or []: a job gives back
    GPUs of type t so that another job fits an option needing more of type t than is free."""
    same = (ct == cur_t[ci]) & (ct >= 0)
    free_ct = free[np.maximum(ct, 0)]
    fits_alone = (ct < 0) | (take <= free_ct)
    best_net = tol
    best: list[tuple[int, int]] = []
    for t in range(n_types):
        # Releasers: the job holds type t and gives GPUs of it back (and fits wherever it goes).
        on_t = cur_t[ci] == t
        freed = np.where(same, -take, cur_w[ci])
        rel = on_t & (freed > 0) & ((ct == t) | fits_alone)
        # Requirers: an option of type t needing more GPUs than are free, by at most the largest configuration.
        need = np.where(ct == t, take - free[t], 0)
        req = (ct == t) & (need > 0) & (need <= span) & (gain > tol)
        if not rel.any() or not req.any():
            continue
        r_idx = np.flatnonzero(rel)
        loss = -gain[r_idx]
        amount = np.minimum(freed[r_idx], span)
        per = np.full(span + 1, np.inf)
        np.minimum.at(per, amount, loss)
        # min loss over releasers freeing at least d GPUs, for every d, with the releaser achieving it
        table = np.where(d_index[None, :] >= d_index[:, None], per[None, :], np.inf)
        e_best = table.argmin(axis=1)
        suffix = table[d_index, e_best]
        q_idx = np.flatnonzero(req)
        net = gain[q_idx] - suffix[need[q_idx]]
        for _ in range(4):
            k = int(np.argmax(net))
            if net[k] <= best_net:
                break
            b = int(q_idx[k])
            e = int(e_best[need[b]])
            pool = r_idx[(amount == e) & (loss == per[e])]
            pool = pool[ci[pool] != ci[b]]
            ok = False
            for a in pool[:4]:
                after = free.copy()
                for m in (int(a), b):
                    if cur_t[ci[m]] >= 0:
                        after[cur_t[ci[m]]] += cur_w[ci[m]]
                    if ct[m] >= 0:
                        after[ct[m]] -= cw[m]
                if np.all(after >= 0):
                    ok = True
                    best_net = float(net[k])
                    best = [(int(ci[a]), int(cj[a])), (int(ci[b]), int(cj[b]))]
                    break
            if ok:
                break
            net[k] = -np.inf
    return best


def solve_lagrangian(
    problem: AssignmentProblem,
    max_passes: int = MAX_PASSES,
    rel_tol: float = 1e-7,
    polish: bool = True,
    start: FloatArray | None = None,
    hulls: Hulls | None = None,
) -> LagrangianResult:
    """Feasible allocation, its objective and a certified upper bound (value units). Forced jobs must have been
    applied beforehand (``solve_assignment`` does). Coordinate descent stops when a pass gains less than
    ``rel_tol`` of L; ``polish``: then finish the prices with the core LP. ``start``: prices to start the search
    from (a warm start: the previous round's) instead of the pooled cluster's single price; ``hulls``: the
    problem's :func:`build_hulls`, when the caller has them."""
    n_jobs = problem.num_jobs
    capacity = problem.capacity.astype(np.float64)
    if np.any(problem.gpus < 1):
        raise ValueError("the Lagrangian method needs every configuration to use at least one GPU")
    if n_jobs == 0 or problem.value.shape[1] == 0 or not problem.valid.any():
        empty = np.full(n_jobs, -1, dtype=np.int64)
        return LagrangianResult(empty, 0.0, 0.0, np.zeros(len(capacity)))
    if hulls is None:
        hulls = build_hulls(problem)
    n_types = len(capacity)
    choice: IntArray | None = None
    prices = np.zeros(n_types)
    bound = np.inf
    passes = 0
    if start is not None:
        start = np.maximum(np.asarray(start, dtype=np.float64), 0.0)
    if polish and n_types > 1 and n_jobs <= CORE_JOBS:
        # Every job fits in the core: the LP is solved in full, no price search needed to pick the core.
        polished = lp_polish(hulls, capacity, prices)
        if polished is not None:
            prices, choice = polished.prices, polished.choice
            bound, _ = dual_value(problem, prices)
    if choice is None:
        warm = start is not None
        if start is None and n_types > 1:
            start = np.full(n_types, common_price(problem))
        prices, passes = minimise_dual(hulls, capacity, prices=start, max_passes=max_passes, rel_tol=rel_tol, warm=warm)
        bound, _ = dual_value(problem, prices)
        if polish and n_types > 1:  # with one type the line search is already the LP optimum (Dyer–Zemel)
            polished = lp_polish(hulls, capacity, prices)
            if polished is not None:
                lp_bound, _ = dual_value(problem, polished.prices)
                choice = polished.choice
                if lp_bound < bound:
                    bound, prices = lp_bound, polished.prices
    if choice is None:
        choice = primal_at(hulls, prices)
    if np.any(_usage(problem, choice) > problem.capacity):
        choice = repair(problem, hulls, choice)
    choice = improve(problem, choice, prices, bound)
    rows = np.flatnonzero(choice >= 0)
    objective = float(problem.value[rows, choice[rows]].sum())
    return LagrangianResult(choice=choice, objective=objective, bound=bound, prices=prices, passes=passes)
