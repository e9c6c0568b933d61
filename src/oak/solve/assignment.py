"""The per-round problem of paper §III-B in its generic form, and the dispatch to exact solvers.

    maximise  Σ_ij x_ij · value_ij
    s.t.      Σ_j x_ij ≤ 1 (each job), Σ_ij x_ij · gpus_j ≤ capacity_t (each GPU type t), x binary,
              x_i,forced_i = 1 where forced_i ≥ 0.

``value_ij`` is the gain of giving job i configuration j over leaving it unallocated: OAK's objective
Σ x·U + μ_na·Σ(1 − Σ_j x) equals μ_na·J + Σ x·(U − μ_na), so value = U − μ_na.

Methods: ``dp`` (exact dynamic programme over GPUs used per type, :mod:`oak.solve.dp`), ``highs`` (exact MILP),
``cvxpy`` (the paper's CVXPY + GLPK_MI), ``lagrangian`` (per-type prices: a feasible allocation with a certified
upper bound, :mod:`oak.solve.lagrangian`, for thousands of GPUs and jobs) and ``auto``, which picks by size.
Every result carries ``bound`` ≥ the optimum (= objective for the exact methods) and its relative ``gap``.

**Decisions that do not depend on the CPU.** Values come out of transcendental kernels (``np.power``, ``np.exp``)
whose last bits differ between CPUs (AVX-512, AVX2 and scalar loops) and between array positions. Before any
method sees them, :func:`snap_values` rounds every value to a dyadic grid: multiples of q = 2^(e − 24), where
2^(e−1) < max |value| ≤ 2^e, so values that agree to about 6e-8 of the round's largest value are equal
(``VALUE_GRID_BITS``). Every sum of up to 2^28 snapped values is then exact in float64, so the methods compare
allocations exactly: a few ulps of noise moves a value across a grid point with probability ≈ 2^-25 (not at all
when the noise is absent), two indistinguishable jobs tie exactly, and each method's fixed, documented tie rule
(the DP: leave a job out first, then the configuration of lowest index) decides. A problem may name each job's
current configuration (``prefer``): it gets a tie bonus of q·2^-TIE_BITS, so that among allocations the grid cannot
tell apart the one that moves fewest jobs wins (the bonuses of all jobs together stay below one step while there are
fewer than 2^TIE_BITS jobs). The exact DPs (``dp`` and the core DP that makes ``auto`` exact) honour it; HiGHS and
the price method treat differences below their 1e-9 tolerances as ties and break them their own way, as
deterministically, their inputs being the same on every CPU. Nothing downstream reads a CPU-dependent kernel: no BLAS products and only stable
sorts (tests/test_portable.py).

**Warm starts.** Consecutive rounds differ little (a job failed, one arrived), and the per-type prices that
settle one round are near those of the next. Where the whole round's programme is beyond the DP (``dp_states``
of the cluster's capacities above ``DP_MAX_STATES``; below it every round is solved cold, as before), ``auto``
starts the price search from ``warm_prices`` (the previous round's ``AssignmentResult.prices``, carried by the
engine as ``RoundSnapshot.solver_prices``), skips the LP polish, and keeps the answer only when its own bound or
the core DP proves it optimal; otherwise the round is solved cold, exactly as without a warm start. So a round the
cold procedure proves optimal is proved optimal warm too (the same grid objective; tests/test_warm_start.py), and
answers within a gap are the cold ones. Optimal allocations can still differ where several are worth exactly the
same; twins (bit-identical rows) are dealt their options one way (:func:`canonical_twins`) on both paths.
"""

from __future__ import annotations

import functools
import itertools
import sys
import time
from dataclasses import dataclass

import numpy as np

from oak.model.snapshot import BoolArray, FloatArray, IntArray

SOLVER_METHODS = ("auto", "dp", "highs", "cvxpy", "lagrangian")

#: ``auto``'s label when the Lagrangian certificate plus a dynamic programme over the jobs it cannot settle
#: (:mod:`oak.solve.core`) proved the allocation optimal.
CORE_METHOD = "lagrangian+core"

#: ``auto`` stays exact (DP, or Lagrangian + core DP) while the product of (capacity + 1) over GPU types, the DP's
#: state space, stays below this; above it ``auto`` returns the Lagrangian allocation with its certified gap.
DP_MAX_STATES = 200_000

#: Should the core DP give up below ``DP_MAX_STATES``, ``auto`` runs the sequential DP only while its work, states
#: × jobs × configurations (≈ element updates, 1–2 ns each on the 2-core development machine), stays below this.
DP_MAX_WORK = 50_000_000

#: ``auto`` runs the sequential DP directly (rather than Lagrangian + core DP, whose fixed cost is a few ms) while
#: its work stays below this.
DP_DIRECT_WORK = 2_000_000


#: Values are snapped to multiples of 2^-VALUE_GRID_BITS of the binade of the round's largest |value| (module doc).
VALUE_GRID_BITS = 24

#: ``snap_values`` runs compiled (``oak.solve.snap_kernel``) above this many entries, or once the kernel is loaded.
SNAP_KERNEL_MIN = 2_000

#: A job's current configuration is worth q·2^-TIE_BITS more than the grid says (module doc): ties keep jobs in place.
TIE_BITS = 16


def value_quantum(value: FloatArray, valid: BoolArray) -> float:
    """The grid step q = 2^(e − VALUE_GRID_BITS) for the largest finite |value| among ``valid`` entries, which lies
    in (2^(e−1), 2^e]; 0.0 when there is none (or all are 0). The half-open binade makes snapping idempotent: a
    largest value rounded up to 2^e keeps its e, one rounded down to 2^(e−1) halves q, and the grid of q/2
    holds every multiple of q."""
    mask = valid & np.isfinite(value)
    if not mask.any():
        return 0.0
    largest = float(np.abs(value[mask]).max())
    if largest == 0.0:
        return 0.0
    mantissa, e = np.frexp(largest)  # largest = mantissa · 2^e, mantissa in [0.5, 1)
    return float(np.ldexp(1.0, int(e) - (mantissa == 0.5) - VALUE_GRID_BITS))


def snap_values(
    value: FloatArray, valid: BoolArray, prefer: IntArray | None = None, engine: str = "auto"
) -> FloatArray:
    """``value`` with every finite ``valid`` entry rounded to the nearest multiple of :func:`value_quantum` (halves
    to even), a positive value to at least one step and a negative one to at most minus one step, so that worth
    more (or less) than leaving a job out stays so. Other entries are returned as they are. Exact arithmetic:
    scaling by a power of two and rounding to an integer lose nothing else. ``prefer`` (J,): each job's current
    configuration (−1: none), which gets the tie bonus q·2^-TIE_BITS on top of its grid value. ``engine``: ``numpy``,
    ``numba`` (one compiled pass, :mod:`oak.solve.snap_kernel`: the same grid bit for bit; 2-D values) or ``auto``:
    numba above ``SNAP_KERNEL_MIN`` entries or once the kernel is loaded."""
    q = value_quantum(value, valid)
    if q == 0.0:
        return value
    if (
        value.ndim == 2
        and value.dtype == np.float64
        and use_kernel(engine, value.size > SNAP_KERNEL_MIN, "snap_kernel")
    ):  # float64 values only: other types keep NumPy's arithmetic in their own precision
        from oak.solve.snap_kernel import snap_grid

        bonus_at = np.full(0, -1, dtype=np.int64) if prefer is None else np.asarray(prefer, dtype=np.int64)
        return np.asarray(
            snap_grid(
                np.ascontiguousarray(value, dtype=np.float64),
                np.ascontiguousarray(valid, dtype=np.bool_),
                np.ascontiguousarray(bonus_at),
                q,
                float(np.ldexp(q, -TIE_BITS)),
            )
        )
    mask = valid & np.isfinite(value)
    with np.errstate(invalid="ignore", over="ignore"):
        k = np.rint(np.where(mask, value, 0.0) / q)
    k = np.where(value > 0, np.maximum(k, 1.0), np.where(value < 0, np.minimum(k, -1.0), 0.0))
    out = np.where(mask, k * q, value)
    if prefer is not None:
        rows = np.flatnonzero(prefer >= 0)
        cols = prefer[rows]
        keep = mask[rows, cols]
        out[rows[keep], cols[keep]] += np.ldexp(q, -TIE_BITS)
    return out


def dot(a: FloatArray | IntArray, b: FloatArray | IntArray) -> FloatArray:
    """Σ over the last axis of a·b in a fixed order (NumPy's own summation, never BLAS, whose kernels — and so
    whose rounding — differ between CPUs)."""
    return np.asarray((np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)).sum(axis=-1))


@dataclass(frozen=True, eq=False)
class AssignmentProblem:
    """value/valid: (J, C); gpus/gpu_type: (C,); capacity: (T,) GPUs; forced: (J,) config or −1; prefer: (J,) the
    configuration each job holds now or −1, kept when the grid cannot tell it from another (module doc);
    warm_prices: (T,) per-GPU-type prices to start the price search from (the previous round's
    ``AssignmentResult.prices``), used by ``auto`` where the cluster's programme is beyond the DP (module doc,
    "Warm starts")."""

    value: FloatArray
    valid: BoolArray
    gpus: IntArray
    gpu_type: IntArray
    capacity: IntArray
    forced: IntArray | None = None
    prefer: IntArray | None = None
    warm_prices: FloatArray | None = None

    @property
    def num_jobs(self) -> int:
        return int(self.value.shape[0])


@dataclass(frozen=True, eq=False)
class AssignmentResult:
    """choice: (J,) configuration per job or −1; objective: Σ chosen values (value units); method: the method that
    ran (``auto`` resolved); wall_ms: solver wall time (ms); bound: an upper bound on the optimum (value units),
    equal to ``objective`` for the exact methods; prices: (T,) the final per-GPU-type prices when a Lagrangian path
    ran (value per GPU; a warm start for the next round's problem), else None; warm: whether the search from
    ``AssignmentProblem.warm_prices`` alone settled the round (no LP polish needed)."""

    choice: IntArray
    objective: float
    method: str
    wall_ms: float
    bound: float = float("nan")
    prices: FloatArray | None = None
    warm: bool = False

    def __post_init__(self) -> None:
        if self.bound != self.bound:  # NaN: not given, the method is exact
            object.__setattr__(self, "bound", self.objective)

    @property
    def gap(self) -> float:
        """Certified relative optimality gap (bound − objective) / max(|bound|, 1e-12); 0 for exact methods."""
        return (self.bound - self.objective) / max(abs(self.bound), 1e-12)


def kernel_loaded(kernel: str) -> bool:
    """Whether the compiled ``oak.solve.<kernel>`` is loaded in this process: once it is, ``auto`` engines take it
    at any size (each kernel gives the NumPy code's results bit for bit — tests/test_warm_start.py, run with and
    without the widest SIMD kernels — so the choice changes only the time)."""
    return f"oak.solve.{kernel}" in sys.modules


#: The kernels a sweep's processes load up front (:func:`load_kernels`): those of every round of the exact DP, which
#: small rounds otherwise run in NumPy so that a short command does not pay numba's load.
ROUND_KERNELS = ("snap_kernel", "tree_kernel")


@functools.cache
def load_kernels() -> None:
    """Load the compiled :data:`ROUND_KERNELS` in this process, so that ``auto`` engines take them at any size from
    now on (:func:`kernel_loaded`), and call each once on a tiny input so that numba loads its machine code from the
    on-disk cache now (or compiles and caches it, on the first call in a checkout). Worth it where a process runs
    many rounds — a sweep's workers (``oak.sim.compare``) — not for one short run: the load costs ~0.3–1 s, the
    kernels save ~0.1 ms a paper-scale round. Results are the same either way, bit for bit."""
    from oak.solve.dp import solve_dp_tree

    one = AssignmentProblem(
        value=np.array([[1.0]]),
        valid=np.array([[True]]),
        gpus=np.array([1], dtype=np.int64),
        gpu_type=np.array([0], dtype=np.int64),
        capacity=np.array([1], dtype=np.int64),
        prefer=np.array([0], dtype=np.int64),
    )
    snap_values(one.value, one.valid, one.prefer, engine="numba")
    solve_dp_tree(one, engine="numba")


def use_kernel(engine: str, large: bool, kernel: str) -> bool:
    """Whether a function with an ``engine`` argument runs compiled: ``numba`` always, ``auto`` for a ``large``
    input or once ``oak.solve.<kernel>`` is loaded (``kernel_loaded``), ``numpy`` never."""
    return engine == "numba" or (engine == "auto" and (large or kernel_loaded(kernel)))


def dp_states(capacity: IntArray) -> float:
    """The exact DP's state space for these capacities: the product of (capacity + 1) over GPU types."""
    states = 1.0
    for c in np.asarray(capacity).tolist():
        states *= c + 1.0
    return states


def auto_method(problem: AssignmentProblem) -> str:
    """``auto``'s choice for a problem (forced jobs already applied):

    * ``dp`` while the state space is tiny (the merge tree, as on the paper's 12 GPUs) or the sequential DP's work
      is small (``DP_DIRECT_WORK``);
    * ``lagrangian+core`` while the DP's state space stays below ``DP_MAX_STATES``: exact, prices first, then a DP
      over only the jobs the bound cannot settle (falling back to the sequential DP);
    * ``lagrangian`` above: a certified gap, made exact by the core DP when that is cheap.

    Configurations of 0 GPUs (prices cannot act on them) send the last two cases to the exact DP or HiGHS."""
    states = dp_states(problem.capacity)
    if states > DP_MAX_STATES:
        return "highs" if np.any(problem.gpus < 1) else "lagrangian"  # prices need GPUs to act on
    from oak.solve.dp import TREE_MAX_WORK

    jobs = max(problem.num_jobs, 1)
    if states * states * jobs <= TREE_MAX_WORK or states * jobs * max(problem.value.shape[1], 1) <= DP_DIRECT_WORK:
        return "dp"
    return "dp" if np.any(problem.gpus < 1) else CORE_METHOD


def _solve_lagrangian_auto(
    problem: AssignmentProblem, exact: bool, warm: FloatArray | None = None
) -> tuple[IntArray, float | None, str, FloatArray, bool]:
    """Lagrangian allocation, then the core DP: with ``exact`` it must succeed (else the sequential DP runs, when
    its work is below ``DP_MAX_WORK``); otherwise it is tried on a small budget and skipped if it would not fit.
    Returns (choice, bound or None when proved optimal, method label, final prices, whether the warm start alone
    settled it).

    With ``warm`` prices the price search starts there and skips the LP polish; the result stands when its
    bound, or the core DP, proves it optimal. Otherwise the cold procedure runs as if there were no warm start
    (so a round the cold procedure proves optimal is proved optimal warm too, and one it cannot prove gets the
    cold answer)."""
    from oak.solve.core import MAX_CORE_JOBS, MAX_CORE_STATES, solve_core
    from oak.solve.lagrangian import build_hulls, solve_lagrangian

    hulls = build_hulls(problem)
    max_states, max_jobs = (MAX_CORE_STATES, MAX_CORE_JOBS) if exact else (2_000, 48)
    if warm is not None and len(warm) == len(problem.capacity) > 1 and bool(np.isfinite(warm).all()):
        first = solve_lagrangian(problem, start=warm, polish=False, hulls=hulls)
        if first.gap <= 0.0:
            return first.choice, None, CORE_METHOD, first.prices, True
        core = solve_core(problem, first.prices, first.bound, first.choice, max_states, max_jobs)
        if core is not None:
            return core, None, CORE_METHOD, first.prices, True
    res = solve_lagrangian(problem, hulls=hulls)
    choice, bound, prices, objective = res.choice, res.bound, res.prices, res.objective
    if bound - objective <= 0.0:
        return choice, None, CORE_METHOD, prices, False
    core = solve_core(problem, prices, bound, choice, max_states, max_jobs)
    if core is not None:
        return core, None, CORE_METHOD, prices, False
    states = dp_states(problem.capacity)
    if exact and states * problem.num_jobs * max(problem.value.shape[1], 1) <= DP_MAX_WORK:
        from oak.solve.dp import solve_dp_sequential

        return solve_dp_sequential(problem), None, "dp", prices, False
    return choice, bound, "lagrangian", prices, False


def canonical_twins(problem: AssignmentProblem, choice: IntArray, engine: str = "auto") -> IntArray:
    """``choice`` with the options of jobs whose rows are bit-identical (values, validity, so the same GPUs on the
    grid) dealt out in a fixed order: the most valuable to the lowest job index (then the lower configuration
    index). Allocations that differ only by how twins share their options are worth exactly the same; this picks
    one of them whatever path the solver took (a warm and a cold start reach the same optimum).

    ``engine``: ``numpy`` (below), ``numba`` (:mod:`oak.solve.twins_kernel`: one pass, the same groups, the same
    answer; float64 values, as every snapped round's) or ``auto``: numba for float64 values above
    ``SNAP_KERNEL_MIN`` entries or once that kernel is loaded."""
    n_jobs, n_cfg = problem.value.shape
    if n_jobs < 2 or n_cfg == 0:
        return choice
    if problem.value.dtype == np.float64 and use_kernel(engine, problem.value.size > SNAP_KERNEL_MIN, "twins_kernel"):
        from oak.solve.twins_kernel import twins_deal

        out: IntArray = twins_deal(
            np.ascontiguousarray(problem.value), np.ascontiguousarray(problem.valid), np.asarray(choice, np.int64)
        )
        return out
    # rows that differ in a fingerprint differ: only jobs whose fingerprints collide can be twins
    fingerprint = np.where(problem.valid, problem.value, 0.0).sum(axis=1) + problem.valid.sum(axis=1)
    order = np.argsort(fingerprint, kind="stable")
    ranked = fingerprint[order]
    same = ranked[1:] == ranked[:-1]
    if not same.any():
        return choice
    out = choice.copy()
    edges = np.flatnonzero(np.concatenate([[True], ~same, [True]])).tolist()
    for lo, hi in itertools.pairwise(edges):  # each run of equal fingerprints (usually one twin group)
        if hi - lo < 2:
            continue
        run = np.sort(order[lo:hi])  # ascending job index
        key = np.ascontiguousarray(np.where(problem.valid[run], problem.value[run], np.nan))
        rows = key.view(np.dtype((np.void, key.dtype.itemsize * n_cfg))).ravel()  # bytes compared: the rows' bits
        if bool((rows == rows[0]).all()):
            groups = [run]
        else:
            _, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
            by_group = run[np.argsort(inverse.ravel(), kind="stable")]
            ends = np.cumsum(counts).tolist()
            groups = [by_group[e - c : e] for e, c in zip(ends, counts.tolist(), strict=True) if c > 1]
        for members in groups:
            chosen = out[members]
            worth = np.where(chosen >= 0, problem.value[members[0], np.maximum(chosen, 0)], 0.0)
            out[members] = chosen[np.lexsort((chosen, -worth))]
    return out


def solve_assignment(problem: AssignmentProblem, method: str = "auto", first_come: bool = False) -> AssignmentResult:
    """Solve exactly with the DP (``dp``), HiGHS (``highs``) or CVXPY + GLPK_MI (``cvxpy``), or with a certified
    gap by the Lagrangian method (``lagrangian``).

    Equal jobs (rows bit-identical on the grid) share their options by :func:`canonical_twins` — the most valuable
    to the lowest job index — in rounds beyond the exact DP (so a warm and a cold start agree), and in every round
    with ``first_come`` (``oak`` hands the rows oldest first, so the job that came first is served first among
    equals). The objective is the same either way; only which of two equal jobs waits changes.

    ``auto`` picks by size (see ``auto_method``): exact up to tens of GPUs per type (DP, or Lagrangian prices plus a
    DP over the jobs they leave open), the Lagrangian method with its certified gap beyond. ``bound`` ≥ optimum
    and ``gap`` come with every result (bound = objective for exact answers).

    Every method solves the problem with its values on the grid of :func:`snap_values` ("exact" = optimal among
    allocations compared on the grid, within J·q/2 of the optimum in the given values); ``objective`` is the chosen
    allocation's worth in the values given, and a Lagrangian ``bound`` is widened by what the grid took from each
    job (:func:`_grid_slack`), so objective ≤ optimum ≤ bound holds for the problem as given.
    """
    if method not in SOLVER_METHODS:
        raise ValueError(f"solver method {method!r}: expected one of {SOLVER_METHODS}")
    start = time.perf_counter()
    auto = method == "auto"
    given = problem
    problem = snapped(given)
    reduced, base_choice, _ = _apply_forced(problem)
    if method == "auto":
        method = auto_method(reduced)
    bound: float | None = None
    prices: FloatArray | None = None
    warm = False
    if method == CORE_METHOD or (method == "lagrangian" and auto):
        # warm starts where the whole round's programme is beyond the DP (the cluster's size decides, not the
        # GPUs restoring jobs hold this round); there twins share their options one way whatever the start
        large = auto and dp_states(given.capacity) > DP_MAX_STATES
        warm_from = given.warm_prices if large else None
        choice, bound, method, prices, warm = _solve_lagrangian_auto(reduced, method == CORE_METHOD, warm_from)
        first_come = first_come or large
    elif method == "dp":
        from oak.solve.dp import solve_dp

        choice = solve_dp(reduced)
    elif method == "highs":
        from oak.solve.highs import solve_highs

        choice = solve_highs(reduced)
    elif method == "lagrangian":
        from oak.solve.lagrangian import solve_lagrangian

        res = solve_lagrangian(reduced)
        choice = res.choice
        bound = res.bound
        prices = res.prices
    else:
        from oak.solve.cvxpy_backend import solve_cvxpy

        choice = solve_cvxpy(reduced)
    if first_come:
        choice = canonical_twins(reduced, choice)
    forced = base_choice >= 0
    if reduced is not problem:
        choice = np.where(forced, base_choice, choice)
    # the grid decides between allocations; what the chosen one is worth is reported in the values given
    rows = np.flatnonzero(forced)
    base_value = float(given.value[rows, base_choice[rows]].sum())
    free_value = _objective(given, choice, skip=forced if reduced is not problem else None)
    objective = base_value + free_value
    if bound is not None:
        bound += _grid_slack(given.value, problem.value, reduced.valid)
        if free_value - 1e-9 * max(1.0, abs(free_value)) <= bound < free_value:
            bound = free_value  # rounding in the last digits only: objective ≤ optimum ≤ bound holds exactly
    total_bound = objective if bound is None else base_value + bound
    wall_ms = (time.perf_counter() - start) * 1e3
    return AssignmentResult(
        choice=choice,
        objective=objective,
        method=method,
        wall_ms=wall_ms,
        bound=total_bound,
        prices=prices,
        warm=warm,
    )


def snapped(problem: AssignmentProblem) -> AssignmentProblem:
    """The problem with its values on the grid of :func:`snap_values` (the same object when there are none)."""
    value = snap_values(problem.value, problem.valid, problem.prefer)
    if value is problem.value:
        return problem
    return AssignmentProblem(
        value,
        problem.valid,
        problem.gpus,
        problem.gpu_type,
        problem.capacity,
        problem.forced,
        problem.prefer,
        problem.warm_prices,
    )


def _grid_slack(given: FloatArray, on_grid: FloatArray, valid: BoolArray) -> float:
    """Σ over jobs of the most the grid took from any of the job's valid values: a bound on the snapped problem plus
    this bounds the problem as given (any allocation is worth at most that much more in the given values)."""
    if given is on_grid:
        return 0.0
    lost = np.where(valid, given - on_grid, 0.0)
    return float(np.maximum(lost.max(axis=1, initial=0.0), 0.0).sum())


def _objective(problem: AssignmentProblem, choice: IntArray, skip: BoolArray | None = None) -> float:
    """Σ value of the chosen configurations, leaving out the rows in ``skip``."""
    rows = np.flatnonzero(choice >= 0) if skip is None else np.flatnonzero((choice >= 0) & ~skip)
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
    reduced = AssignmentProblem(
        problem.value, valid, problem.gpus, problem.gpu_type, capacity, None, warm_prices=problem.warm_prices
    )
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
