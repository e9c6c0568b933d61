"""Warm-started rounds (#33): the compiled hull loop gives the NumPy loop's hulls bit for bit; a round started from
the previous round's prices is proved optimal whenever the cold solve is, with the same objective on the grid;
any start, however poor, still gives a feasible allocation under a valid bound; twins share their options one way;
a simulation beyond the DP is as deterministic warm as cold, and the prices travel with the round."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from oak.model.cluster import cluster_preset
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import make_policy
from oak.sim.simulator import Simulator
from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import (
    CORE_METHOD,
    DP_MAX_STATES,
    _apply_forced,
    canonical_twins,
    check_feasible,
    dp_states,
    snap_values,
    snapped,
    value_quantum,
)
from oak.solve.core import core_options_numpy, solve_core
from oak.solve.instances import random_instance
from oak.solve.lagrangian import (
    _grouped_points,
    build_hulls,
    improve,
    minimise_dual,
    primal_at,
    repair,
    solve_lagrangian,
)
from oak.workloads import load_workload


def _assert_same_hulls(problem: AssignmentProblem) -> None:
    """build_hulls compiled and in NumPy: every array of the same shape, type and bits."""
    a = build_hulls(problem, engine="numpy")
    b = build_hulls(problem, engine="numba")
    for name in ("gpus", "value", "config", "dw", "slope"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert np.array_equal(x, y, equal_nan=True), name


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([48, 256, 1024]), types=st.integers(1, 4),
       jobs=st.integers(1, 300))  # fmt: skip
def test_compiled_hulls_equal_numpy_hulls_bit_for_bit(seed: int, gpus: int, types: int, jobs: int) -> None:
    problem = snapped(random_instance(np.random.default_rng(seed), gpus, types, jobs))
    _assert_same_hulls(problem)


def _primal_by_sorting(hulls, prices):  # type: ignore[no-untyped-def]
    """Each job's best hull point by a stable sort on GPUs and the first maximum: the tie rule spelt out."""
    reduced = hulls.value - prices[:, None, None] * hulls.gpus
    n_types, h, n_jobs = reduced.shape
    flat = reduced.reshape(n_types * h, n_jobs)
    key = np.argsort(hulls.gpus.reshape(n_types * h, n_jobs), axis=0, kind="stable")
    ordered = np.take_along_axis(flat, key, axis=0)
    pick = np.take_along_axis(key, ordered.argmax(axis=0)[None, :], axis=0)[0]
    t_pick, k_pick = np.divmod(pick, h)
    return hulls.config[t_pick, k_pick, np.arange(n_jobs)].astype(np.int64)


@pytest.mark.portable
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), types=st.integers(1, 4), jobs=st.integers(1, 200), ties=st.booleans())
def test_best_hull_points_break_ties_to_fewer_gpus_then_the_first(seed: int, types: int, jobs: int, ties: bool) -> None:
    rng = np.random.default_rng(seed)
    problem = snapped(random_instance(rng, 256, types, jobs))
    hulls = build_hulls(problem)
    slopes = hulls.slope[np.isfinite(hulls.slope)]
    if ties and len(slopes):  # prices on a hull slope: two points of one job tie in reduced value
        prices = rng.choice(slopes, size=types)
    else:
        prices = rng.uniform(0.0, 2.0, size=types) * float(np.median(slopes)) if len(slopes) else np.zeros(types)
    assert np.array_equal(primal_at(hulls, prices), _primal_by_sorting(hulls, prices))


@pytest.mark.portable
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), types=st.integers(1, 3), jobs=st.integers(1, 120))
def test_compiled_hulls_equal_numpy_hulls_where_node_shapes_share_a_gpu_count(seed: int, types: int, jobs: int) -> None:
    """Configurations of one type with the same GPU count (other node shapes) stand for that count by the most
    valuable of them, per job: the compiled pass picks the same configuration per hull point as NumPy."""
    rng = np.random.default_rng(seed)
    base = random_instance(rng, 256, types, jobs)
    twin = rng.choice(len(base.gpus), size=max(1, len(base.gpus) // 2), replace=False)  # another shape, same count
    value = np.concatenate([base.value, base.value[:, twin] + rng.normal(0.0, 0.05, (jobs, len(twin)))], axis=1)
    valid = np.concatenate([base.valid, rng.random((jobs, len(twin))) < 0.9], axis=1)
    problem = snapped(
        dataclasses.replace(
            base,
            value=value,
            valid=valid,
            gpus=np.concatenate([base.gpus, base.gpus[twin]]),
            gpu_type=np.concatenate([base.gpu_type, base.gpu_type[twin]]),
        )
    )
    assert _grouped_points(problem)[2].ndim == 3  # per-job configurations: the path under test
    _assert_same_hulls(problem)


@pytest.mark.portable
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), types=st.integers(1, 4), jobs=st.integers(1, 200))
def test_compiled_grouping_equals_numpy_with_equal_values_and_invalid_groups(seed: int, types: int, jobs: int) -> None:
    """Points grouped per (type, GPU count) compiled and in NumPy, where shapes of one count are worth the same
    (the lowest configuration index stands for them) or are all invalid for a job: the same arrays, bit for bit."""
    rng = np.random.default_rng(seed)
    base = random_instance(rng, 256, types, jobs)
    twin = rng.choice(len(base.gpus), size=max(1, len(base.gpus) // 2), replace=False)
    extra = np.where(rng.random((jobs, len(twin))) < 0.5, base.value[:, twin], base.value[:, twin] * 1.01)
    value = np.concatenate([extra, base.value], axis=1)  # the copies first: a tie goes to the lower index
    valid = np.concatenate([rng.random((jobs, len(twin))) < 0.8, base.valid], axis=1)
    valid[rng.random(jobs) < 0.2] = False  # some jobs fit nowhere: groups of −inf
    if rng.random() < 0.3:  # a NaN wins its group, as np.maximum has it, and matches no configuration
        later = len(twin) + int(twin[0])  # the original of copy 0: same group, after it
        value[0, later], valid[0, later] = np.nan, True
    problem = dataclasses.replace(
        base,
        value=value,
        valid=valid,
        gpus=np.concatenate([base.gpus[twin], base.gpus]),
        gpu_type=np.concatenate([base.gpu_type[twin], base.gpu_type]),
    )
    a, b = _grouped_points(problem, "numpy"), _grouped_points(problem, "numba")
    assert a[2].ndim == 3
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), jobs=st.integers(1, 300), scale=st.sampled_from([1e-3, 1.0, 3e5]))
def test_compiled_grid_equals_numpy_bit_for_bit(seed: int, jobs: int, scale: float) -> None:
    """``snap_values`` compiled and in NumPy: the same grid values, ties rounded to even (values placed on
    half-steps), signs kept off zero, the tie bonus on current configurations, non-finite and invalid entries left."""
    rng = np.random.default_rng(seed)
    problem = random_instance(rng, 256, 3, jobs)
    value = problem.value * scale
    value[rng.random(value.shape) < 0.05] = np.inf
    q = value_quantum(value, problem.valid)
    halves = rng.random(value.shape) < 0.2  # exactly halfway between two grid points
    value = np.where(halves, (np.floor(value / q) + 0.5) * q, value)
    value[rng.random(value.shape) < 0.05] = 0.0
    prefer = np.where(rng.random(jobs) < 0.5, rng.integers(0, value.shape[1], jobs), -1)
    for keep in (None, prefer):
        a = snap_values(value, problem.valid, keep, engine="numpy")
        b = snap_values(value, problem.valid, keep, engine="numba")
        assert a.dtype == b.dtype and np.array_equal(a, b)


def _random_feasible(problem: AssignmentProblem, rng: np.random.Generator) -> np.ndarray:
    """Jobs in random order take a random valid configuration while it fits (else none)."""
    free = problem.capacity.astype(np.int64).copy()
    out = np.full(problem.num_jobs, -1, dtype=np.int64)
    for i in rng.permutation(problem.num_jobs).tolist():
        opts = np.flatnonzero(problem.valid[i])
        if len(opts) == 0 or rng.random() < 0.2:
            continue
        j = int(rng.choice(opts))
        if problem.gpus[j] <= free[problem.gpu_type[j]]:
            out[i] = j
            free[problem.gpu_type[j]] -= problem.gpus[j]
    return out


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([48, 256, 1024]), types=st.integers(1, 4),
       jobs=st.integers(1, 300), start=st.sampled_from(["random", "lagrangian"]))  # fmt: skip
def test_compiled_local_search_equals_numpy_bit_for_bit(
    seed: int, gpus: int, types: int, jobs: int, start: str
) -> None:
    """``improve``'s compiled search makes the same moves as the NumPy one: from a random feasible allocation
    (many single moves and pairs) and from the price search's own allocation with its prices and bound."""
    rng = np.random.default_rng(seed)
    problem = snapped(random_instance(rng, gpus, types, jobs))
    res = solve_lagrangian(problem, polish=False)
    first = _random_feasible(problem, rng) if start == "random" else res.choice
    a = improve(problem, first, res.prices, res.bound, engine="numpy")
    b = improve(problem, first, res.prices, res.bound, engine="numba")
    assert a.dtype == b.dtype and np.array_equal(a, b)


def test_compiled_price_search_ends_on_a_negative_capacity() -> None:
    """No round has a negative capacity, but the compiled line search must end on one as NumPy's does: the first
    threshold from the top already exceeds it."""
    hulls = build_hulls(random_instance(np.random.default_rng(0), 16, 1, 6))
    a = minimise_dual(hulls, np.array([-1.0]), engine="numpy", max_passes=2)
    b = minimise_dual(hulls, np.array([-1.0]), engine="numba", max_passes=2)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1] and a[0][0] > 0


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([48, 256, 1024]), types=st.integers(1, 4),
       jobs=st.integers(1, 300), warm=st.booleans(), first=st.sampled_from([None, 0.0]))  # fmt: skip
def test_compiled_price_search_equals_numpy_bit_for_bit(
    seed: int, gpus: int, types: int, jobs: int, warm: bool, first: float | None
) -> None:
    """Also with the first type's capacity gone (every node of the type down)."""
    problem = snapped(random_instance(np.random.default_rng(seed), gpus, types, jobs))
    hulls = build_hulls(problem)
    capacity = problem.capacity.astype(np.float64)
    if first is not None:
        capacity[0] = first
    start = np.random.default_rng(seed + 1).uniform(0.0, 0.2, size=types) if warm else np.zeros(types)
    a = minimise_dual(hulls, capacity, start, warm=warm, engine="numpy")
    b = minimise_dual(hulls, capacity, start, warm=warm, engine="numba")
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([48, 256, 1024]), types=st.integers(1, 4),
       jobs=st.integers(2, 300), small=st.booleans(), twins=st.booleans())  # fmt: skip
def test_compiled_core_programme_equals_numpy(
    seed: int, gpus: int, types: int, jobs: int, small: bool, twins: bool
) -> None:
    """Also with twins (jobs of identical rows, as a simulation's queued jobs of one application often are):
    partial allocations of equal loss and usage, where the tie rule decides which job gets what."""
    problem = random_instance(np.random.default_rng(seed), gpus, types, jobs)
    if twins:
        rows = np.arange(jobs) // 3  # three jobs to a row
        problem = dataclasses.replace(problem, value=problem.value[rows], valid=problem.valid[rows])
    problem = snapped(problem)
    res = solve_lagrangian(problem, polish=False)
    budget = {"max_states": 2_000, "max_jobs": 48} if small else {}
    a = solve_core(problem, res.prices, res.bound, res.choice, engine="numpy", **budget)  # type: ignore[arg-type]
    b = solve_core(problem, res.prices, res.bound, res.choice, engine="numba", **budget)  # type: ignore[arg-type]
    assert (a is None) == (b is None)
    if a is not None:
        assert b is not None and np.array_equal(a, b)


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([48, 256, 1024]), types=st.integers(1, 4),
       jobs=st.integers(1, 300), share=st.sampled_from([0.0, 0.01, 0.1, 1.0]), max_jobs=st.sampled_from([4, 400]))  # fmt: skip
def test_compiled_core_set_up_equals_numpy(
    seed: int, gpus: int, types: int, jobs: int, share: float, max_jobs: int
) -> None:
    """The core programme's set-up, compiled and in NumPy, at budgets from none to the whole gap: the same status,
    fixed jobs, loss (bits), options in the same order, room."""
    from oak.solve.core_kernel import core_options

    problem = snapped(random_instance(np.random.default_rng(seed), gpus, types, jobs))
    res = solve_lagrangian(problem, polish=False)
    g, t, cap = problem.gpus.astype(np.int64), problem.gpu_type.astype(np.int64), problem.capacity.astype(np.int64)
    red = np.where(problem.valid, problem.value - res.prices[t][None, :] * g[None, :], -np.inf)
    best = np.maximum(red.max(axis=1, initial=-np.inf), 0.0)
    delta = best[:, None] - red
    fits = problem.valid & (g[None, :] <= cap[t][None, :])
    lb = float(problem.value[res.choice >= 0, res.choice[res.choice >= 0]].sum())
    limit = max(res.bound - lb, 0.0) * share + 1e-9 * max(1.0, abs(res.bound))
    a = core_options_numpy(delta, best, fits, limit, g, t, cap, max_jobs)
    b = core_options(delta, best, fits, limit, g, t, cap, max_jobs)
    assert a[0] == b[0]
    if a[0] == 0:
        for x, y in zip(a[1:], b[1:], strict=True):
            assert x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)
        assert a[3].tobytes() == b[3].tobytes()  # the fixed jobs' loss, summed in the same order


@pytest.mark.portable
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), jobs=st.integers(1, 1000), density=st.sampled_from([0.02, 0.2, 0.6]))
def test_compiled_core_set_up_equals_numpy_on_any_table(seed: int, jobs: int, density: float) -> None:
    """The same on arbitrary tables, where many jobs keep a single option of nonzero loss (their sum's order
    shows) and none is sometimes out of the limit."""
    from oak.solve.core_kernel import core_options

    rng = np.random.default_rng(seed)
    n_cfg, n_types = 12, 3
    gpus = rng.integers(1, 9, size=n_cfg).astype(np.int64)
    gtype = rng.integers(0, n_types, size=n_cfg).astype(np.int64)
    capacity = np.full(n_types, 8 * jobs, dtype=np.int64) // rng.integers(1, 3, size=n_types)
    limit = float(rng.choice([1.0, 1e5]))
    delta = np.where(rng.random((jobs, n_cfg)) < 0.9, rng.uniform(0.0, 50.0, (jobs, n_cfg)), np.inf)
    fits = rng.random((jobs, n_cfg)) < density
    own = rng.integers(0, n_cfg, size=jobs)  # every job fits one configuration within the limit
    fits[np.arange(jobs), own] = True
    delta[np.arange(jobs), own] = rng.uniform(0.0, min(limit, 50.0), jobs)
    best = np.where(rng.random(jobs) < 0.7, 1e6, rng.uniform(0.0, 2.0, jobs))  # mostly, none is out of the limit
    a = core_options_numpy(delta, best, fits, limit, gpus, gtype, capacity, 10**6)
    b = core_options(delta, best, fits, limit, gpus, gtype, capacity, 10**6)
    assert a[0] == b[0]
    for x, y in zip(a[1:], b[1:], strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)
    assert a[3].tobytes() == b[3].tobytes()


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), gpus=st.sampled_from([48, 256, 1024]), types=st.integers(1, 4),
       jobs=st.integers(1, 300), scale=st.sampled_from([0.0, 0.3, 1.0]), off=st.floats(0.0, 0.5),
       twins=st.booleans())  # fmt: skip
def test_compiled_repair_equals_numpy_bit_for_bit(
    seed: int, gpus: int, types: int, jobs: int, scale: float, off: float, twins: bool
) -> None:
    """Allocations over capacity (each job's best hull point at low prices), some jobs moved off their hulls
    (dropped whole at their average value per GPU), with twins (equal slopes: the sort's tie rule shows): the
    same repair compiled and in NumPy."""
    rng = np.random.default_rng(seed)
    problem = random_instance(rng, gpus, types, jobs)
    if twins:
        rows = np.arange(jobs) // 3
        problem = dataclasses.replace(problem, value=problem.value[rows], valid=problem.valid[rows])
    problem = snapped(problem)
    hulls = build_hulls(problem)
    slopes = hulls.slope[np.isfinite(hulls.slope)]
    prices = np.full(types, scale * float(np.median(slopes)) if len(slopes) else 0.0)
    choice = primal_at(hulls, prices)
    moved = rng.random(jobs) < off
    for i in np.flatnonzero(moved).tolist():
        opts = np.flatnonzero(problem.valid[i])
        if len(opts):
            choice[i] = int(rng.choice(opts))
    a = repair(problem, hulls, choice, engine="numpy")
    b = repair(problem, hulls, choice, engine="numba")
    assert a.dtype == b.dtype and np.array_equal(a, b)
    check_feasible(problem, b)


@pytest.mark.portable  # the kernels must equal NumPy with every SIMD kernel and with the widest off
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 4099])
def test_the_kernels_sum_as_numpy_does(n: int) -> None:
    from oak.solve.pairwise_kernel import pairwise_sum

    rng = np.random.default_rng(n)
    for _ in range(10):
        a = rng.normal(size=n) * 10.0 ** rng.integers(-8, 8, size=n)
        assert pairwise_sum(a, 0, n) == a.sum()


def _rounds(seed: int, n: int, gpus: int = 512, types: int = 3, jobs: int = 150) -> list[AssignmentProblem]:
    """``n`` consecutive rounds: one random round whose values drift by up to 2 % per round (as a round's goodput,
    restart and switching factors move), a job leaving and another arriving now and then."""
    rng = np.random.default_rng(seed)
    base = random_instance(rng, gpus, types, jobs)
    out = []
    value = base.value.copy()
    valid = base.valid.copy()
    for _ in range(n):
        value = value * (1.0 + rng.uniform(-0.02, 0.02, size=value.shape))
        if rng.random() < 0.3:
            i = int(rng.integers(len(value)))
            value[i] = rng.permutation(value[i])
            valid[i] = rng.random(valid.shape[1]) < 0.9
        out.append(dataclasses.replace(base, value=value.copy(), valid=valid.copy()))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warm_rounds_are_proved_optimal_with_the_cold_objective(seed: int) -> None:
    rounds = _rounds(seed, 12)
    assert dp_states(rounds[0].capacity) > DP_MAX_STATES  # the size where warm starts apply
    prices = None
    settled = 0
    for problem in rounds:
        cold = solve_assignment(problem)
        warm = solve_assignment(dataclasses.replace(problem, warm_prices=prices))
        check_feasible(problem, warm.choice)
        assert warm.objective <= cold.bound + 1e-9 * abs(cold.bound)  # each certificate holds for the other
        assert cold.objective <= warm.bound + 1e-9 * abs(warm.bound)
        if cold.method == CORE_METHOD:
            assert warm.method == CORE_METHOD, "the cold solve proved this round optimal, the warm one did not"
            grid = snapped(problem).value
            rows_w, rows_c = np.flatnonzero(warm.choice >= 0), np.flatnonzero(cold.choice >= 0)
            # optimal on the grid both: exactly the same grid objective (sums of grid values are exact)
            assert grid[rows_w, warm.choice[rows_w]].sum() == grid[rows_c, cold.choice[rows_c]].sum()
        settled += warm.warm
        assert warm.prices is not None and warm.prices.shape == problem.capacity.shape
        prices = warm.prices
    assert settled >= 1  # the previous round's prices settle rounds without the LP


@pytest.mark.parametrize("start", [[0.0, 0.0, 0.0], [1e6, 1e6, 1e6], [0.0, 1e3, 0.0], [np.nan, 1.0, 1.0]])
def test_any_warm_start_gives_a_feasible_allocation_under_a_valid_bound(start: list[float]) -> None:
    problem = _rounds(5, 1)[0]
    cold = solve_assignment(problem)
    warm = solve_assignment(dataclasses.replace(problem, warm_prices=np.array(start)))
    check_feasible(problem, warm.choice)
    assert warm.bound >= cold.objective - 1e-9 * abs(cold.objective)
    assert warm.objective <= cold.bound + 1e-9 * abs(cold.bound)
    if cold.method == CORE_METHOD:
        assert warm.method == CORE_METHOD


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_twins_share_their_options_one_way(engine: str) -> None:
    rng = np.random.default_rng(3)
    base = random_instance(rng, 64, 2, 6)
    value = base.value.copy()
    valid = base.valid.copy()
    value[4], valid[4] = value[1], valid[1]  # jobs 1 and 4 are twins; so are 2 and 5
    value[5], valid[5] = value[2], valid[2]
    problem = dataclasses.replace(base, value=value, valid=valid)
    j_hi = int(np.argmax(np.where(valid[1], value[1], -np.inf)))
    j_lo = int(np.flatnonzero(valid[1] & (np.arange(valid.shape[1]) != j_hi))[0])
    choice = np.array([0, j_lo, -1, 1, j_hi, 2])
    out = canonical_twins(problem, choice, engine=engine)
    assert out[1] == j_hi and out[4] == j_lo  # the more valuable option to the lower index
    assert sorted(out[[2, 5]].tolist()) == sorted([-1, 2]) and out[2] == (2 if value[2, 2] > 0 else -1)
    assert out[0] == 0 and out[3] == 1  # jobs without a twin keep theirs
    assert np.array_equal(canonical_twins(problem, out, engine=engine), out)  # idempotent
    rows = np.flatnonzero(out >= 0)
    rows_in = np.flatnonzero(choice >= 0)
    assert value[rows, out[rows]].sum() == pytest.approx(value[rows_in, choice[rows_in]].sum(), rel=1e-15)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), jobs=st.integers(2, 9), twins=st.integers(2, 5))
def test_first_come_deals_twins_by_index_in_every_round_at_the_same_objective(seed: int, jobs: int, twins: int) -> None:
    """``solve_assignment(first_come=True)`` on rounds the exact DP solves: the same objective as without, and
    every group of twins (bit-identical rows) holds its options in ``canonical_twins``'s order, the lower index the
    more valuable; forced jobs keep theirs."""
    rng = np.random.default_rng(seed)
    base = random_instance(rng, 12, 1, jobs)
    value, valid = base.value.copy(), base.valid.copy()
    group = rng.choice(jobs, size=min(twins, jobs), replace=False)
    value[group], valid[group] = value[group[0]], valid[group[0]]
    forced = np.full(jobs, -1, np.int64)
    if jobs > 3 and valid[jobs - 1].any():
        forced[jobs - 1] = int(np.flatnonzero(valid[jobs - 1])[0])
    problem = dataclasses.replace(base, value=value, valid=valid, forced=forced)
    plain = solve_assignment(problem)
    first = solve_assignment(problem, first_come=True)
    assert first.method == plain.method == "dp"
    assert first.objective == pytest.approx(plain.objective, rel=1e-12, abs=1e-12)
    check_feasible(problem, first.choice)
    members = np.sort(group[forced[group] < 0])
    worth = np.where(first.choice[members] >= 0, value[members[0], np.maximum(first.choice[members], 0)], 0.0)
    assert (np.diff(worth) <= 0).all()  # the lower index, the more valuable option
    assert sorted(first.choice[members].tolist()) == sorted(plain.choice[members].tolist())


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_twins_with_options_of_equal_worth_take_them_in_configuration_order(engine: str) -> None:
    base = random_instance(np.random.default_rng(5), 64, 1, 4)
    value, valid = base.value.copy(), base.valid.copy()
    value[:, 1] = value[:, 0]
    valid[:, :2] = True
    value[2], valid[2] = value[0], valid[0]  # jobs 0 and 2 are twins; their configurations 0 and 1 are worth the same
    problem = dataclasses.replace(base, value=value, valid=valid)
    out = canonical_twins(problem, np.array([1, -1, 0, -1]), engine=engine)
    assert out.tolist() == [0, -1, 1, -1]


@pytest.mark.parametrize(
    "row",
    [[np.nan, 1.0, 2.0], [np.inf, -np.inf, 1.0, 2.0], [1e308, 1e308, -1e308, -1e308, 0.0, 0.0, 1.0, 2.0]],
    ids=["nan", "both-infinities", "sum-overflows"],
)
def test_twins_with_non_finite_fingerprints_are_dealt_as_numpy_deals_them(row: list[float]) -> None:
    """Rows whose NumPy fingerprint is NaN (a NaN value, +inf with −inf, finite values whose pairwise sum is
    inf − inf) have no twin in the NumPy code, as NaN equals nothing; the compiled pass agrees."""
    n = 3
    value = np.array([row] * n)
    problem = AssignmentProblem(
        value, np.ones(value.shape, bool), np.ones(len(row), np.int64), np.zeros(len(row), np.int64), np.array([64])
    )
    choice = np.array([len(row) - 1, -1, len(row) - 2])
    with np.errstate(invalid="ignore", over="ignore"):
        want = canonical_twins(problem, choice, engine="numpy")
    assert np.array_equal(canonical_twins(problem, choice, engine="numba"), want)


def _twins_by_sorting_all_rows(problem: AssignmentProblem, choice: np.ndarray) -> np.ndarray:
    """canonical_twins as first written: every job whose fingerprint collides, grouped by one sort of their rows."""
    n_jobs, n_cfg = problem.value.shape
    fingerprint = np.where(problem.valid, problem.value, 0.0).sum(axis=1) + problem.valid.sum(axis=1)
    order = np.argsort(fingerprint, kind="stable")
    same = fingerprint[order[1:]] == fingerprint[order[:-1]]
    if n_jobs < 2 or not same.any():
        return choice
    maybe = np.unique(np.concatenate([order[1:][same], order[:-1][same]]))
    key = np.ascontiguousarray(np.where(problem.valid[maybe], problem.value[maybe], np.nan))
    rows = key.view(np.dtype((np.void, key.dtype.itemsize * n_cfg))).ravel()
    _, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
    out = choice.copy()
    for g in np.flatnonzero(counts > 1).tolist():
        members = maybe[inverse.ravel() == g]
        chosen = out[members]
        worth = np.where(chosen >= 0, problem.value[members[0], np.maximum(chosen, 0)], 0.0)
        out[members] = chosen[np.lexsort((chosen, -worth))]
    return out


@pytest.mark.portable
@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("seed", range(30))
def test_twins_are_grouped_as_by_sorting_every_row(seed: int, engine: str) -> None:
    """Twin groups found per run of equal fingerprints equal those of one sort over all candidate rows: many
    twins, several groups, and rows whose fingerprints collide without being twins (a row's values permuted)."""
    rng = np.random.default_rng(seed)
    base = random_instance(rng, 256, 2, 40)
    value, valid = base.value.copy(), base.valid.copy()
    for _ in range(int(rng.integers(1, 6))):  # twin groups
        src = int(rng.integers(40))
        for dst in rng.choice(40, size=int(rng.integers(1, 8)), replace=False).tolist():
            value[dst], valid[dst] = value[src], valid[src]
    for _ in range(int(rng.integers(0, 4))):  # a colliding fingerprint: the same values in another order
        src, dst = rng.choice(40, size=2, replace=False).tolist()
        valid[src] = True
        perm = rng.permutation(value.shape[1])
        value[dst], valid[dst] = value[src][perm], True
    problem = snapped(dataclasses.replace(base, value=value, valid=valid))
    if seed % 3 == 0:  # ties in worth: twins holding configurations of equal value
        value = problem.value.copy()
        value[:, 1] = value[:, 0]
        problem = dataclasses.replace(problem, value=value)
    choice = _random_feasible(problem, rng)
    want = _twins_by_sorting_all_rows(problem, choice)
    assert np.array_equal(canonical_twins(problem, choice, engine=engine), want)


def test_forced_jobs_keep_the_warm_start() -> None:
    problem = _rounds(7, 1)[0]
    forced = np.full(problem.num_jobs, -1, dtype=np.int64)
    forced[0] = int(np.flatnonzero(problem.valid[0])[0])
    prices = np.array([0.1, 0.2, 0.3])
    reduced, _, _ = _apply_forced(dataclasses.replace(problem, forced=forced, warm_prices=prices))
    assert reduced.warm_prices is prices


def test_simulation_beyond_the_dp_is_deterministic_warm_and_its_prices_travel() -> None:
    cluster = cluster_preset("sia-64x4")  # 96 + 64 + 96 GPUs: beyond the DP, the warm path
    seen: list[np.ndarray | None] = []

    class Recording:
        def __init__(self) -> None:
            self.inner = make_policy("oak")

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def decide(self, snap: RoundSnapshot) -> Allocation:
            seen.append(snap.solver_prices)
            return self.inner.decide(snap)

    wl = load_workload("small")
    a = Simulator(wl, cluster).run(Recording(), 0.1, 0)  # type: ignore[arg-type]
    b = Simulator(wl, cluster).run(make_policy("oak"), 0.1, 0)
    assert [j.jct_s for j in a.jobs] == [j.jct_s for j in b.jobs]
    assert seen[0] is None and any(p is not None for p in seen[1:])
    cold = Simulator(wl, cluster, warm_start=False).run(make_policy("oak"), 0.1, 0)
    assert all(j.jct_s is not None for j in cold.jobs)


def test_bench_sim_reports_the_cold_reference_and_the_paired_rounds(tmp_path: Path) -> None:
    from oak.cli.main import app

    out = tmp_path / "sim.json"
    res = CliRunner().invoke(
        app, ["bench", "sim", "--workload", "small", "--cluster", "sia-64x4", "--paired", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "auto/cold" in res.output and "paired rounds" in res.output
    data = json.loads(out.read_text())
    assert [r["solver"] for r in data["sim"]] == ["auto", "auto, cold"]
    assert data["goals"] == [] and "goal (issue" not in res.output  # no [fast-at-scale] goal at this size
    paired = data["paired"]
    assert paired["rounds"] == data["sim"][0]["rounds"] > 0
    assert 0 <= paired["differ"] <= paired["rounds"]
    assert paired["warm_exact"] >= paired["cold_exact"]  # a round the cold solve proves, the warm one proves
    assert paired["differ_both_exact"] <= paired["differ"]
    assert paired["relative_shortfall_max"] >= 0.0
    bad = CliRunner().invoke(app, ["bench", "sim", "--reference", "lp"])
    assert bad.exit_code == 2 and "expected highs, cold or none" in bad.output


def test_bench_sim_with_the_round_kernels_gives_the_same_run(tmp_path: Path) -> None:
    """--round-kernels times the run as a sweep's worker makes it, with the same results as without it (that the
    kernels equal NumPy bit for bit is tested on the kernels themselves, in fresh processes and here)."""
    from oak.cli.main import app

    jcts = []
    for extra in ([], ["--round-kernels"]):
        out = tmp_path / f"sim{len(extra)}.json"
        args = ["bench", "sim", "--workload", "small", "--reference", "none", "--json", str(out), *extra]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        data = json.loads(out.read_text())
        assert data["round_kernels"] is bool(extra)
        jcts.append(data["sim"][0]["mean_jct_s"])
    assert "round kernels loaded" in res.output
    assert jcts[0] == jcts[1]
