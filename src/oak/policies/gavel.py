"""Gavel's finish-time-fairness policy (reference §6), with 60 s rounds like every policy in the comparison.

Optimises min_X max_m (t_m + ρ_m/τ_m(X)) / (o_m + Σ_m/τ_m^iso): the largest ratio of a job's finish time
under time fractions X to its finish time on an isolated 1/J share of every GPU type. Solved exactly: for one
GPU type by bisection on the ratio with closed-form feasibility; for several by Kelley's cutting planes on
the convex programme min z s.t. τ_m(X) ≥ ρ_m / (z·d_m − t_m), a few warm-started HiGHS LPs a round. Time
fractions become allocations through Gavel's round-based priorities. Departs from Gavel in using 60 s
rounds, Sia's configurations for the rigid GPU count (the demand rounded down to one), and progress rates
from the simulator's goodput model instead of Gavel's throughput profiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import Allocation, FloatArray, IntArray, RoundSnapshot
from oak.policies.base import PolicyBase
from oak.policies.rigid import rigid_configs

NEW_JOB_PRIORITY = 1e9


@dataclass(frozen=True)
class FtfProblem:
    """Finish-time fairness inputs. throughput: (M, K) progress per second at the job's rigid GPU count on
    type k (0 = cannot run there); age_s, remaining, total, overhead_s: (M,); gpus: (M,) rigid GPU counts;
    capacity: (K,) GPUs per type."""

    throughput: FloatArray
    age_s: FloatArray
    remaining: FloatArray
    total: FloatArray
    overhead_s: FloatArray
    gpus: IntArray
    capacity: IntArray

    def isolated_throughput(self) -> FloatArray:
        """τ^iso: throughput on a 1/M slice of every type (rows scaled down to a total fraction ≤ 1)."""
        m = len(self.age_s)
        x = (self.capacity[None, :] / m) / self.gpus[:, None]
        x = x * (self.throughput > 0)
        rows = x.sum(axis=1)
        x = x / np.maximum(rows, 1.0)[:, None]
        return (self.throughput * x).sum(axis=1)  # type: ignore[no-any-return]

    def denominators(self) -> FloatArray:
        iso = self.isolated_throughput()
        with np.errstate(divide="ignore"):
            return self.overhead_s + np.where(iso > 0, self.total / iso, np.inf)

    def ratios(self, x: FloatArray) -> FloatArray:
        """Each job's finish-time ratio under time fractions ``x`` (M, K)."""
        tau = (self.throughput * x).sum(axis=1)
        finish = self.age_s + np.divide(self.remaining, tau, out=np.full_like(tau, np.inf), where=tau > 0)
        return finish / self.denominators()  # type: ignore[no-any-return]


def _fractions_at(problem: FtfProblem, z: float, denom: FloatArray) -> FloatArray | None:
    """Time fractions meeting ratio ≤ z for every job, or None when infeasible."""
    slack = z * denom - problem.age_s
    if np.any(slack <= 0):
        return None
    need = problem.remaining / slack  # required throughput per job
    m, k = problem.throughput.shape
    if k == 1:
        thr = problem.throughput[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(thr > 0, need / thr, np.inf)
        if np.any(x > 1 + 1e-12) or float((problem.gpus * x).sum()) > problem.capacity[0] + 1e-9:
            return None
        return np.minimum(x, 1.0)[:, None]
    # LP feasibility: Σ_k T_mk x_mk ≥ need_m, Σ_k x_mk ≤ 1, Σ_m w_m x_mk ≤ W_k, x ≥ 0; rows job by job (need,
    # one), then one per type, as a sparse matrix (HiGHS gets the same nonzeros as from the dense one)
    from scipy.optimize import linprog  # here, not at import: loading scipy.optimize slows every command
    from scipy.sparse import coo_array

    n = m * k
    col = np.arange(n)
    job = col // k
    thr = problem.throughput.reshape(-1)
    rows = np.concatenate([2 * job, 2 * job + 1, 2 * m + col % k])
    cols = np.concatenate([col, col, col])
    vals = np.concatenate([-thr, np.ones(n), problem.gpus[job].astype(np.float64)])
    keep = vals != 0
    a_ub = coo_array((vals[keep], (rows[keep], cols[keep])), shape=(2 * m + k, n)).tocsc()
    b_ub = np.concatenate([np.stack([-need, np.ones(m)], axis=1).reshape(-1), problem.capacity.astype(np.float64)])
    res = linprog(np.zeros(n), A_ub=a_ub, b_ub=b_ub, bounds=(0, 1), method="highs")
    if res.status != 0:
        return None
    return np.asarray(res.x).reshape(m, k)


def alone_ratios(problem: FtfProblem, denom: FloatArray) -> FloatArray:
    """(M,) each job's finish-time ratio were it alone on the cluster at its fastest: its largest throughput
    over time fractions (Σ_k x_k ≤ 1, x_k ≤ 1, x_k · GPUs ≤ type k's GPUs: a fractional knapsack, fastest type
    first). No allocation gives a job a lower ratio, so the largest of them bounds the optimum from below."""
    thr = problem.throughput
    share = np.minimum(1.0, problem.capacity[None, :] / problem.gpus[:, None])
    order = np.argsort(-thr, axis=1, kind="stable")
    t_sorted = np.take_along_axis(thr, order, axis=1)
    u_sorted = np.take_along_axis(share, order, axis=1)
    before = np.cumsum(u_sorted, axis=1) - u_sorted
    fastest = (t_sorted * np.clip(1.0 - before, 0.0, u_sorted)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(problem.remaining > 0, problem.remaining / fastest, 0.0)
    return np.asarray((problem.age_s + left) / denom, dtype=np.float64)


#: how ``ftf_fractions`` solves a round: cutting planes on several GPU types (else bisection), or bisection always
FTF_METHODS = ("auto", "bisection")

#: the largest coefficient of a cut row handed to HiGHS (it rejects rows above 1e15)
MAX_CUT_COEF = 1e12

#: LPs a round's cutting planes may take before the bisection is used instead (2 in every recorded round)
MAX_CUT_ROUNDS = 60


def _ftf_cuts(problem: FtfProblem, denom: FloatArray, rel_tol: float) -> tuple[FloatArray, float] | None:
    """Kelley's cutting planes on min z s.t. τ_m(X) ≥ φ_m(z) = ρ_m / (z·d_m − t_m), X's per-job and per-type
    limits. φ_m is convex and decreasing on z > t_m/d_m, so its tangents at any z₀ there lie below it: an LP
    with tangent cuts is a relaxation, its z a lower bound, and the ratio its X truly achieves
    (``FtfProblem.ratios``) an upper bound. Jobs whose constraint the LP's X violates get a cut at the LP's z,
    the LP is re-solved from its last basis, until the bounds meet within ``rel_tol``. z starts at the largest
    ratio a job reaches alone (``alone_ratios``), inside every job's domain, and the first cuts touch φ at the
    ratio of the isolated shares. Returns X and the ratio it achieves, or None where HiGHS fails or the
    bounds do not meet within ``MAX_CUT_ROUNDS`` LPs (the caller bisects then)."""
    import highspy  # here, not at import: only rounds on clusters of several GPU types need it

    from oak.solve.highs import _new_highs

    thr = problem.throughput
    m, k = thr.shape
    rem, age = problem.remaining, problem.age_s
    work = rem > 0  # a job with no work left needs nothing: z ≥ t_m/d_m, in ``lower``, is its constraint
    lower = float(np.max(alone_ratios(problem, denom)))
    share = (problem.capacity[None, :] / m) / problem.gpus[:, None] * (thr > 0)
    best = share / np.maximum(share.sum(axis=1), 1.0)[:, None]  # the isolated shares: feasible
    upper = float(_achieved(problem, best, denom).max())
    if upper - lower <= rel_tol * upper or not work.any():
        return best, upper
    inf = highspy.kHighsInf
    h = _new_highs()
    lp = highspy.HighsLp()
    lp.num_col_ = m * k + 1  # X row-major, then z
    lp.num_row_ = m + k  # Σ_k x_mk ≤ 1; Σ_m GPUs_m x_mk ≤ W_k (the cuts are added below)
    lp.col_cost_ = np.concatenate([np.zeros(m * k), [1.0]])
    lp.col_lower_ = np.concatenate([np.zeros(m * k), [lower]])
    lp.col_upper_ = np.concatenate([np.ones(m * k), [inf]])
    lp.row_lower_ = np.full(m + k, -inf)
    lp.row_upper_ = np.concatenate([np.ones(m), problem.capacity.astype(np.float64)])
    job = np.repeat(np.arange(m), k)
    index = np.empty(2 * m * k, dtype=np.int32)
    value = np.empty(2 * m * k)
    index[0::2], value[0::2] = job, 1.0
    index[1::2], value[1::2] = m + np.tile(np.arange(k), m), problem.gpus[job]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.concatenate([np.arange(0, 2 * m * k + 1, 2), [2 * m * k]]).astype(np.int32)
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    h.passModel(lp)

    def cut(jobs: IntArray, z0: float) -> bool:
        # τ_j(X) − φ_j'(z₀)·z ≥ φ_j(z₀) − φ_j'(z₀)·z₀, the tangent of φ_j at z₀, divided by φ_j(z₀): HiGHS's
        # tolerances are absolute, and a job whose need is tiny would otherwise be met only to within them
        slack = z0 * denom[jobs] - age[jobs]
        slope = denom[jobs] / slack  # −φ_j'(z₀) / φ_j(z₀)
        cols = np.concatenate([jobs[:, None] * k + np.arange(k)[None, :], np.full((len(jobs), 1), m * k)], axis=1)
        coef = np.concatenate([thr[jobs] * (slack / rem[jobs])[:, None], slope[:, None]], axis=1)
        lower_end = 1.0 + slope * z0
        # a job that needs almost nothing would get coefficients beyond what HiGHS accepts (1e15): such rows
        # are scaled down to a largest coefficient of 1e12 (the same cut)
        scale = np.minimum(1.0, MAX_CUT_COEF / coef.max(axis=1))
        starts = np.arange(0, len(jobs) * (k + 1), k + 1, dtype=np.int32)
        status = h.addRows(
            len(jobs),
            lower_end * scale,
            np.full(len(jobs), inf),
            cols.size,
            starts,
            cols.astype(np.int32).reshape(-1),
            (coef * scale[:, None]).reshape(-1),
        )
        return bool(status != highspy.HighsStatus.kError)

    if not cut(np.flatnonzero(work), upper):
        return None
    for _ in range(MAX_CUT_ROUNDS):
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        sol = np.asarray(h.getSolution().col_value)
        x = np.clip(sol[:-1].reshape(m, k), 0.0, 1.0)
        z = max(float(sol[-1]), lower)
        ratios = _achieved(problem, x, denom)
        achieved = float(ratios.max())
        if achieved < upper:
            best, upper = x, achieved
        if upper - z <= rel_tol * upper:
            return best, upper
        short = np.flatnonzero(work & (ratios > z))
        if short.size == 0:  # X meets every φ at z: z is achieved (up to rounding), upper is X's ratio
            return best, upper
        if not cut(short, z):
            return None
    return None


def ftf_fractions(problem: FtfProblem, rel_tol: float = 1e-7, method: str = "auto") -> tuple[FloatArray, float]:
    """Time fractions X minimising the maximum finish-time ratio, and that ratio (``ftf_solve``)."""
    x, z, _ = ftf_solve(problem, rel_tol, method)
    return x, z


def ftf_solve(problem: FtfProblem, rel_tol: float = 1e-7, method: str = "auto") -> tuple[FloatArray, float, str]:
    """X, its ratio and how they were found ("cuts", "bisection", or "none" where no job can run anywhere).
    ``method`` "auto": cutting planes where the cluster has several GPU types (``_ftf_cuts``: within ``rel_tol`` of the optimum), then X from the feasibility
    LP the bisection solves, at that ratio; the bisection where the cluster has one type or where the cuts fail.
    "bisection": the bisection always."""
    if method not in FTF_METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(FTF_METHODS)}")
    denom = problem.denominators()
    finite = np.isfinite(denom) & (problem.throughput.max(axis=1) > 0)
    if not finite.all():  # jobs that can run nowhere are left out of the fairness problem
        x = np.zeros_like(problem.throughput)
        if not finite.any():
            return x, 0.0, "none"
        sub = FtfProblem(
            problem.throughput[finite],
            problem.age_s[finite],
            problem.remaining[finite],
            problem.total[finite],
            problem.overhead_s[finite],
            problem.gpus[finite],
            problem.capacity,
        )
        x[finite], z, path = ftf_solve(sub, rel_tol, method)
        return x, z, path
    if method == "auto" and problem.capacity.size > 1:
        found = _ftf_cuts(problem, denom, rel_tol)
        if found is not None:
            # X from the feasibility LP of the bisection's steps, at the ratio found (the bisection's own last
            # step was at an upper end within its tolerance; where the LP has many optimal vertices the two can
            # differ): on recorded rounds this X keeps a run as the bisection ran it, where the cutting-plane
            # LP's own vertex changes Gavel's priorities (docs/performance.md, "Gavel on several GPU types").
            # The cuts' X stays where that LP's absolute tolerance leaves a job that needs little unserved.
            x, z = found
            for hi in (z, z * (1.0 + rel_tol)):
                at = _fractions_at(problem, hi, denom)
                if at is not None and _achieved(problem, at, denom).max() <= hi * (1.0 + 1e-3):
                    return at, hi, "cuts"
            return x, z, "cuts"
    x, z = _ftf_bisection(problem, denom, rel_tol)
    return x, z, "bisection"


def _achieved(problem: FtfProblem, x: FloatArray, denom: FloatArray) -> FloatArray:
    """(M,) each job's finish-time ratio under X (``FtfProblem.ratios`` with the round's ``denom``), a job with no
    work left finished now (t_m / d_m)."""
    tau = (problem.throughput * x).sum(axis=1)
    finish = problem.age_s + np.divide(problem.remaining, tau, out=np.full_like(tau, np.inf), where=tau > 0)
    return np.asarray(np.where(problem.remaining > 0, finish, problem.age_s) / denom, dtype=np.float64)


def _ftf_bisection(problem: FtfProblem, denom: FloatArray, rel_tol: float) -> tuple[FloatArray, float]:
    """Bisection on the ratio z with a feasibility check per step (closed form for one GPU type, a HiGHS LP
    otherwise): X feasible at the final upper end, and that end."""
    lo = float(np.max(problem.age_s / denom))
    hi = max(2.0 * lo, 1.0)
    best = _fractions_at(problem, hi, denom)
    while best is None:
        lo, hi = hi, hi * 2.0
        best = _fractions_at(problem, hi, denom)
    # relative tolerance, and an absolute floor for an optimum of 0 (lo = 0: e.g. jobs with no work left)
    while hi - lo > rel_tol * hi and hi > 1e-12:
        mid = 0.5 * (lo + hi)
        trial = _fractions_at(problem, mid, denom)
        if trial is None:
            lo = mid
        else:
            hi, best = mid, trial
    return best, hi


@dataclass(frozen=True)
class GavelPolicy(PolicyBase):
    """Gavel with finish-time fairness at each job's rigid GPU count (its demand)."""

    name: str = "gavel"

    def problem(self, snap: RoundSnapshot) -> tuple[FtfProblem, IntArray]:
        """The FTF problem of a round and each job's rigid configuration per GPU type (J, K; −1: none)."""
        cfg, rate = rigid_configs(snap)
        gpus = np.where(cfg >= 0, snap.config_gpus[np.maximum(cfg, 0)], 0).max(axis=1)
        problem = FtfProblem(
            throughput=rate,
            age_s=snap.age_s,
            remaining=snap.remaining_work,
            total=snap.total_work,
            overhead_s=snap.restart_penalty_s,
            gpus=np.maximum(gpus, 1),
            capacity=snap.capacity,
        )
        return problem, cfg

    def decide(self, snap: RoundSnapshot) -> Allocation:
        problem, cfg = self.problem(snap)
        x, z, path = ftf_solve(problem)
        choice, values = round_priorities(snap, cfg, x, problem.gpus)
        return Allocation(config=choice, objective=z, method=f"ftf-{path}", values=values, value_label="priority")


def round_priorities(snap: RoundSnapshot, cfg: IntArray, x: FloatArray, gpus: IntArray) -> tuple[IntArray, FloatArray]:
    """Gavel's round-based priorities and the greedy placement by them: (configuration per job, −1: none;
    priority per (job, configuration), −inf where none).

    A (job, type) pair with a rigid configuration (``cfg`` ≥ 0) has priority x / (the fraction of its life the
    job has run), or x · ``NEW_JOB_PRIORITY`` if it never ran; pairs go by priority, then by deficit (time the
    fractions promised minus time received), then by x, all descending, then by job and type. Each pair takes
    its configuration if its job has none yet and the type has the GPUs. One sort over all pairs (they are
    ~1,000 a round at 2,048 GPUs)."""
    held_gpus = np.maximum(gpus, 1)
    received = snap.attained_gpu_s / held_gpus / np.maximum(snap.age_s, 1e-9)
    never_ran = snap.attained_gpu_s <= 0
    jj, tt = np.nonzero(cfg >= 0)  # row-major: by job, then type
    xs = np.asarray(x, dtype=np.float64)[jj, tt]
    prio = np.where(never_ran[jj], xs * NEW_JOB_PRIORITY, xs / np.maximum(received[jj], 1e-9))
    deficit = xs * snap.age_s[jj] - snap.attained_gpu_s[jj] / held_gpus[jj]
    values = np.full(snap.goodput.shape, -np.inf)
    values[jj, cfg[jj, tt]] = prio
    order = np.lexsort((tt, jj, -xs, -deficit, -prio))
    free = snap.capacity.astype(np.int64).tolist()
    size = snap.config_gpus.tolist()
    choice = [-1] * snap.num_jobs
    for j, t, c in zip(jj[order].tolist(), tt[order].tolist(), cfg[jj[order], tt[order]].tolist(), strict=True):
        if choice[j] < 0 and size[c] <= free[t]:
            choice[j] = c
            free[t] -= size[c]
    return np.asarray(choice, dtype=np.int64), values
