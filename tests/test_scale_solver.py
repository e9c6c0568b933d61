"""The decision engine at scale: every method is feasible and its bound is never below the exact optimum; the exact
methods agree with HiGHS; the Lagrangian method's certified gap is small on large rounds; the bench CLI works."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import CORE_METHOD, check_feasible
from oak.solve.core import solve_core
from oak.solve.dp import solve_dp_sequential, solve_dp_tree
from oak.solve.instances import config_gpus, random_instance, split_capacity
from oak.solve.lagrangian import build_hulls, dual_value, solve_lagrangian


def random_problem(seed: int, types: int, jobs: int, cap_max: int, forced: bool) -> AssignmentProblem:
    """Random GPU counts per type (duplicates included, to exercise several node shapes of one count), values
    N(0.3, 1) (about a third negative), 80 % valid, and optionally some jobs forced to a configuration."""
    rng = np.random.default_rng(seed)
    capacity = rng.integers(1, cap_max + 1, size=types)
    gpus: list[int] = []
    kinds: list[int] = []
    for t in range(types):
        n = int(rng.integers(1, 6))
        gpus += rng.integers(1, int(capacity[t]) + 1, size=n).tolist()
        kinds += [t] * n
    w = np.array(gpus, dtype=np.int64)
    gt = np.array(kinds, dtype=np.int64)
    value = rng.normal(0.3, 1.0, size=(jobs, len(w))) * (1.0 + 0.3 * w[None, :])
    valid = rng.random((jobs, len(w))) < 0.8
    forced_arr = None
    if forced:
        forced_arr = np.full(jobs, -1, dtype=np.int64)
        left = capacity.copy()
        for i in rng.choice(jobs, size=min(jobs, int(rng.integers(1, 4))), replace=False):
            cands = np.flatnonzero(valid[i] & (w <= left[gt]))
            if len(cands):
                j = int(rng.choice(cands))
                forced_arr[i] = j
                left[gt[j]] -= w[j]
    return AssignmentProblem(value, valid, w, gt, capacity.astype(np.int64), forced_arr)


def states(problem: AssignmentProblem) -> float:
    return float(np.prod(problem.capacity.astype(np.float64) + 1.0))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    types=st.integers(1, 4),
    jobs=st.integers(1, 60),
    cap_max=st.sampled_from([1, 4, 12, 24, 64]),
    forced=st.booleans(),
)
def test_methods_feasible_bounds_valid_and_exact_ones_agree(
    seed: int, types: int, jobs: int, cap_max: int, forced: bool
) -> None:
    problem = random_problem(seed, types, jobs, cap_max, forced)
    exact = solve_assignment(problem, "highs")
    check_feasible(problem, exact.choice)
    opt = exact.objective
    scale = max(1.0, float(np.abs(problem.value).sum()))
    methods = ["auto", "lagrangian"] + (["dp"] if states(problem) <= 5_000 else [])
    for method in methods:
        res = solve_assignment(problem, method)
        check_feasible(problem, res.choice)
        assert res.objective <= opt + 1e-9 * scale, method
        assert res.bound >= opt - 1e-9 * scale, method
        assert res.gap >= -1e-12, method
        if res.method in ("dp", CORE_METHOD):  # exact methods: equal to HiGHS, bound = objective
            assert res.objective == pytest.approx(opt, abs=1e-9 * scale), (method, res.method)
            assert res.bound == res.objective
    assert exact.bound == exact.objective and exact.gap == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_merge_tree_and_sequential_dp_agree(seed: int) -> None:
    problem = random_problem(1000 + seed, types=1 + seed % 2, jobs=5 + 6 * seed, cap_max=12, forced=False)
    a, b = solve_dp_tree(problem), solve_dp_sequential(problem)
    check_feasible(problem, a)
    check_feasible(problem, b)
    va = problem.value[np.flatnonzero(a >= 0), a[a >= 0]].sum()
    vb = problem.value[np.flatnonzero(b >= 0), b[b >= 0]].sum()
    assert va == pytest.approx(vb, abs=1e-9)


@pytest.mark.portable  # the kernel must equal NumPy with every SIMD kernel and with the widest off
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    types=st.integers(1, 3),
    jobs=st.integers(1, 17),
    coarse=st.booleans(),
    infinite=st.booleans(),
    huge=st.booleans(),
)
def test_compiled_merge_tree_equals_numpy_bit_for_bit(
    seed: int, types: int, jobs: int, coarse: bool, infinite: bool, huge: bool
) -> None:
    """``solve_dp_tree`` compiled and in NumPy: the same choice per job, ties included (values on a coarse grid
    make many sums equal, which the first maximum must break alike), configurations of 0 GPUs included; a
    problem with an infinite gain, or finite gains whose sums overflow, goes back to NumPy and gets its answer."""
    rng = np.random.default_rng(seed)
    problem = random_problem(seed, types=types, jobs=jobs, cap_max=(12, 5, 3)[types - 1], forced=False)
    value = problem.value
    if coarse:
        value = np.round(value * 2.0) / 2.0
    gpus = problem.gpus.copy()
    gpus[rng.random(len(gpus)) < 0.1] = 0
    if huge:  # finite gains near the largest double: their sums overflow
        value = np.where(value > 0, 1e307 * np.clip(np.ceil(value * 4.0), 1.0, 17.0), value)
    if infinite:
        value = value.copy()
        value[rng.integers(0, jobs), rng.integers(0, value.shape[1])] = np.inf
    problem = AssignmentProblem(
        value=value, valid=problem.valid, gpus=gpus, gpu_type=problem.gpu_type, capacity=problem.capacity
    )
    with np.errstate(invalid="ignore", over="ignore"):  # NumPy's NaN of 0 × inf or ∞ − ∞: the kernel hands back
        a = solve_dp_tree(problem, engine="numpy")
        b = solve_dp_tree(problem, engine="numba")
    assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_long_sweep_loads_the_round_kernels_and_a_short_one_does_not() -> None:
    """A sweep of ``SWEEP_KERNELS_MIN`` runs or more takes the compiled round kernels, a shorter one NumPy; both
    give each run's result bit for bit (checked in fresh processes, whose modules no other test has loaded)."""
    code = """
import json, sys
from oak.sim.compare import SWEEP_KERNELS_MIN, RunSpec, run_many
from oak.solve.assignment import kernel_loaded
n = SWEEP_KERNELS_MIN if sys.argv[1] == "long" else SWEEP_KERNELS_MIN - 1
specs = [RunSpec(p, "small", 0.1, s) for s in range(n) for p in ("oak-paper",)]
res = run_many(specs, workers=1)
print(json.dumps({"kernels": kernel_loaded("tree_kernel") and kernel_loaded("snap_kernel"),
                  "jct": [[j.jct_s for j in r.jobs] for r in res]}))
"""
    import subprocess
    import sys

    out = {}
    for kind in ("long", "short"):
        proc = subprocess.run([sys.executable, "-c", code, kind], capture_output=True, text=True, check=True)
        out[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["long"]["kernels"] is True
    assert out["short"]["kernels"] is False
    assert out["long"]["jct"][: len(out["short"]["jct"])] == out["short"]["jct"]


def test_hulls_are_the_rising_upper_concave_hulls() -> None:
    problem = random_problem(7, types=3, jobs=40, cap_max=24, forced=False)
    hulls = build_hulls(problem)
    for t in range(3):
        for i in range(problem.num_jobs):
            pts = {0: 0.0}
            for j in np.flatnonzero((problem.gpu_type == t) & problem.valid[i]):
                w = int(problem.gpus[j])
                pts[w] = max(pts.get(w, -np.inf), float(problem.value[i, j]))
            verts = [0]
            for w, v in sorted(pts.items()):
                left = min(((v - pts[a]) / (w - a) for a in pts if a < w), default=np.inf)
                right = max(((pts[b] - v) / (b - w) for b in pts if b > w), default=-np.inf)
                if w > 0 and left > max(right, 0.0):
                    verts.append(w)
            assert sorted(set(hulls.gpus[t, :, i].astype(int).tolist())) == verts
            slopes = hulls.slope[t, :, i][hulls.dw[t, :, i] > 0]
            assert np.all(np.diff(slopes) < 0) and np.all(slopes > 0)


def test_lagrangian_gap_is_small_on_a_large_round() -> None:
    problem = random_instance(np.random.default_rng(5), gpus=768, types=3, jobs=300)  # 256 GPUs per type
    res = solve_lagrangian(problem)
    check_feasible(problem, res.choice)
    assert res.gap <= 1e-3
    bound, _ = dual_value(problem, res.prices)
    assert res.bound == pytest.approx(bound, rel=1e-12)
    assert res.bound >= res.objective


def test_lagrangian_gap_on_a_round_of_big_near_linear_jobs() -> None:
    """Near-linear values make many jobs want 64 GPUs: the LP rounding matters and the gap is larger."""
    rng = np.random.default_rng(3)
    problem = random_instance(rng, gpus=768, types=3, jobs=300)
    w = problem.gpus.astype(np.float64)
    value = rng.uniform(0.5, 1.5, size=(300, 1)) * np.power(w, rng.uniform(0.6, 0.95, size=(300, 1))) - 0.5
    problem = AssignmentProblem(value, problem.valid, problem.gpus, problem.gpu_type, problem.capacity)
    res = solve_assignment(problem, "lagrangian")
    check_feasible(problem, res.choice)
    assert res.gap <= 1e-2


def test_core_dp_is_exact_from_any_valid_certificate() -> None:
    problem = random_instance(np.random.default_rng(2), gpus=64, types=3, jobs=50)
    exact = solve_assignment(problem, "highs").objective
    res = solve_lagrangian(problem)
    choice = solve_core(problem, res.prices, res.bound, res.choice)
    assert choice is not None
    check_feasible(problem, choice)
    assert problem.value[np.flatnonzero(choice >= 0), choice[choice >= 0]].sum() == pytest.approx(exact, abs=1e-9)
    # a weaker certificate (prices off the optimum, an empty incumbent) only makes the programme larger
    prices = res.prices * 1.05
    bound, _ = dual_value(problem, prices)
    choice = solve_core(problem, prices, bound, np.full(problem.num_jobs, -1, dtype=np.int64))
    if choice is not None:
        assert problem.value[np.flatnonzero(choice >= 0), choice[choice >= 0]].sum() == pytest.approx(exact, abs=1e-9)


def test_auto_picks_by_size_and_reports_a_bound() -> None:
    paper = random_instance(np.random.default_rng(0), gpus=12, types=1, jobs=20)
    res = solve_assignment(paper)
    assert res.method == "dp" and res.gap == 0.0
    big = random_instance(np.random.default_rng(0), gpus=1024, types=3, jobs=400)
    res = solve_assignment(big)
    assert res.method in ("lagrangian", CORE_METHOD)
    check_feasible(big, res.choice)
    assert 0.0 <= res.gap <= 1e-3


def test_forced_jobs_stay_forced_with_the_lagrangian_method() -> None:
    problem = random_instance(np.random.default_rng(4), gpus=256, types=2, jobs=120)
    forced = np.full(problem.num_jobs, -1, dtype=np.int64)
    for i in range(0, 120, 7):  # a small valid configuration each
        cands = np.flatnonzero(problem.valid[i] & (problem.gpus <= 2))
        if len(cands):
            forced[i] = cands[0]
    problem = AssignmentProblem(problem.value, problem.valid, problem.gpus, problem.gpu_type, problem.capacity, forced)
    for method in ("lagrangian", "auto"):
        res = solve_assignment(problem, method)
        check_feasible(problem, res.choice)
        assert res.bound >= res.objective


def test_instances_follow_sia_configurations() -> None:
    assert split_capacity(10, 3) == [4, 3, 3]
    assert config_gpus(12, 4) == [1, 2, 4, 8, 12]
    assert config_gpus(1024, 8) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    problem = random_instance(np.random.default_rng(0), gpus=100, types=4, jobs=30)
    assert problem.capacity.tolist() == [25, 25, 25, 25]
    assert np.any(problem.value < 0) and np.any(problem.value > 0)


def test_bench_decision_random_rounds_cli(tmp_path: Path) -> None:
    from oak.cli.main import app

    runner = CliRunner()
    out = tmp_path / "scale.json"
    res = runner.invoke(
        app, ["bench", "decision", "--gpus", "24", "--types", "2", "--jobs", "15", "--seeds", "2", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "highs" in res.output
    data = json.loads(out.read_text())
    assert set(data) >= {"method", "median_ms", "p95_ms", "max_gap", "reference_median_ms", "gpus", "types", "jobs"}
    assert data["seeds"] == 2 and len(data["runs"]) == 2 and data["reference_timeouts"] == 0
    assert data["max_gap"] >= 0.0 and data["max_gap_to_reference"] <= 1e-9
    res = runner.invoke(app, ["bench", "decision", "--gpus", "24", "--types", "2", "--jobs", "15", "--seeds", "1",
                              "--no-reference", "--json", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["reference_median_ms"] is None
    res = runner.invoke(app, ["bench", "decision", "--gpus", "24"])
    assert res.exit_code == 2


def test_bench_decision_times_the_round_kernels_after_numpy(tmp_path: Path) -> None:
    """--round-kernels adds each policy's row with the compiled round kernels, timed after the NumPy rows."""
    from oak.cli.main import app

    out = tmp_path / "decision.json"
    args = ["bench", "decision", "--policies", "oak-paper", "--rounds", "10", "--round-kernels", "--json", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = [(r["policy"], r["method"]) for r in json.loads(out.read_text())["decision"]]
    assert rows[-2:] == [("oak", "auto, kernels"), ("oak-paper", "default, kernels")]
    assert rows[:-2] == [("oak", "auto"), ("oak-paper", "default"), ("oak-paper", "highs")]


def test_bench_reference_reports_its_time_limit() -> None:
    from oak.cli.bench import _Referee

    problem = random_instance(np.random.default_rng(0), gpus=1024, types=3, jobs=600)
    referee = _Referee()
    try:
        ms, timed_out, choice = referee.solve(problem, 1e-3)
    finally:
        referee.close()
    assert timed_out and ms >= 0.0
    if choice is not None:
        check_feasible(problem, choice)


@pytest.mark.parametrize("limit", ["nan", "inf", "0", "-1"])
def test_bench_decision_refuses_a_reference_time_limit_that_is_no_limit(limit: str) -> None:
    from oak.cli.main import app

    args = ["bench", "decision", "--gpus", "12", "--types", "1", "--jobs", "4", "--seeds", "1"]
    res = CliRunner().invoke(app, [*args, "--reference-timeout", limit])
    assert res.exit_code == 2, res.output
    assert "--reference-timeout" in res.output and "expected seconds in (0, 86400]" in res.output, res.output
