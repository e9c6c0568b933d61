"""Decisions that do not depend on the CPU: a few ulps of noise in the inputs never changes an allocation.

Values come out of transcendental kernels whose last bits differ between CPUs (AVX-512, AVX2, scalar) and between
array positions. ``solve_assignment`` snaps them to a dyadic grid (``oak.solve.assignment.snap_values``), so every
sum is exact and ties are exact. These tests perturb the inputs by up to ±4 ulps — independently per entry, so that
indistinguishable jobs no longer carry bit-identical inputs — and require the same allocation.

How a test tells a genuine change from a flip: it records the values the solver was given and works out itself,
with the grid step q, whether the noise moved any value across a midpoint between grid points (``crossed``). When
none did (by far the usual case), the allocations must be identical: any difference is a decision made on noise.
When one did (probability ≈ 2^-25 per noisy value), the problems genuinely differ by one step q, and both
allocations must be optimal to within the grid, J·q.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oak.solve.assignment as assignment
from oak.model.snapshot import RoundSnapshot, frozen_array
from oak.policies import make_policy
from oak.solve import AssignmentProblem, solve_assignment
from oak.solve.assignment import check_feasible, dot, snap_values, value_quantum
from oak.solve.instances import random_instance
from support.snapshots import MIXED_12, PAPER_12, random_snapshot

pytestmark = pytest.mark.portable

#: The per-job fields of a RoundSnapshot (first axis = jobs).
JOB_FIELDS = (
    "goodput",
    "valid",
    "t_progress_s",
    "t_ckpt_s",
    "t_queue_s",
    "age_s",
    "restarts",
    "failures",
    "current",
    "restoring",
    "restart_penalty_s",
    "attained_gpu_s",
    "min_gpus",
    "max_gpus",
    "requested_gpus",
    "progress_rate",
    "remaining_work",
    "total_work",
    "current_replicas",
)

#: The policies whose decision is one exact program (they all go through ``solve_assignment``).
PROGRAM_POLICIES = ("oak", "oak-paper", "goodput", "oak-no-age", "oak-no-restart", "oak-aggregate", "sia", "sia-paper")


def perturbed(a: np.ndarray, rng: np.random.Generator, ulps: int = 4) -> np.ndarray:
    """``a`` with every non-zero entry moved by an independent whole number of ulps in [−ulps, ulps]
    (np.nextafter): relative noise, as a kernel's rounding makes; an exact 0 stays 0."""
    out = np.array(a, dtype=np.float64, copy=True)
    steps = np.where(out != 0.0, rng.integers(-ulps, ulps + 1, size=out.shape), 0)
    for k in range(1, ulps + 1):
        out = np.where(steps >= k, np.nextafter(out, np.inf), out)
        out = np.where(steps <= -k, np.nextafter(out, -np.inf), out)
    return out


def with_twins(snap: RoundSnapshot) -> RoundSnapshot:
    """The snapshot with every job repeated right after itself (indistinguishable twins, other names). Twins
    hold no GPUs (two copies of a running job would overfill the cluster), and no job is restoring (restoring jobs
    keep their configuration, and random ones may overfill it)."""
    j = snap.num_jobs
    idx = np.repeat(np.arange(j), 2)
    fields: dict[str, Any] = {f: np.array(np.asarray(getattr(snap, f))[idx]) for f in JOB_FIELDS}
    fields["current"][:] = -1
    fields["restoring"][:] = False
    fields["current_replicas"][:] = 0
    fields = {f: frozen_array(v, v.dtype) for f, v in fields.items()}
    fields["job_names"] = tuple(f"job{i}" for i in range(len(idx)))
    fields["applications"] = tuple(snap.applications[i] for i in idx)
    return dataclasses.replace(snap, **fields)


def crossed(a: np.ndarray, b: np.ndarray, valid: np.ndarray) -> bool:
    """Whether some valid entry of ``a`` and ``b`` rounds to different multiples of the grid step of ``a``."""
    q = value_quantum(a, valid)
    if q == 0.0:
        return not np.array_equal(a[valid], b[valid])
    return not np.array_equal(np.rint(a[valid] / q), np.rint(b[valid] / q))


def test_snapping_is_a_grid_and_idempotent() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        v = rng.normal(size=(6, 9)) * 10.0 ** rng.uniform(-4, 4)
        v[0, 0] = 2.0 ** int(rng.integers(-5, 6)) * (1.0 - float(rng.random()) * 1e-7)  # just below a power of 2
        valid = rng.random(v.shape) < 0.8
        q = value_quantum(v, valid)
        s = snap_values(v, valid)
        assert np.array_equal(snap_values(s, valid), s)  # idempotent
        k = s[valid] / q
        assert np.array_equal(k, np.rint(k))  # multiples of q
        assert np.all(np.abs(k) <= 2.0**assignment.VALUE_GRID_BITS)
        assert np.all(np.sign(s[valid]) == np.sign(v[valid]))  # worth more (less) than nothing stays so
        close = np.abs(v[valid]) >= q
        assert np.all(np.abs(s[valid] - v[valid])[close] <= q / 2)
        assert np.array_equal(s[~valid], v[~valid])  # entries no solver reads are left alone
        # sums of snapped values are exact, whatever the order
        chosen = s[valid]
        assert float(chosen.sum()) == float(chosen[::-1].sum()) == float(np.sort(chosen).sum())


def test_dot_is_not_blas() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(50, 4)), rng.normal(size=4)
    want = [a[i, 0] * b[0] + a[i, 1] * b[1] + a[i, 2] * b[2] + a[i, 3] * b[3] for i in range(50)]
    assert dot(a, b).tolist() == want  # NumPy's fixed pairwise order for 4 terms: ((a0 + a1) + a2) + a3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), method=st.sampled_from(["dp", "highs", "lagrangian", "auto"]))
def test_noise_does_not_change_the_solver_choice(seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    gpus, types = [(12, 1), (16, 2), (48, 3), (256, 2)][int(rng.integers(0, 4))]
    base = random_instance(rng, gpus, types, int(rng.integers(2, 8)) * (gpus // 12))  # contended
    idx = np.repeat(np.arange(base.num_jobs), 2)  # every job with a twin: ties that noise would break
    problem = AssignmentProblem(base.value[idx], base.valid[idx], base.gpus, base.gpu_type, base.capacity)
    noisy = AssignmentProblem(
        perturbed(problem.value, rng), problem.valid, problem.gpus, problem.gpu_type, problem.capacity
    )
    a, b = solve_assignment(problem, method), solve_assignment(noisy, method)
    check_feasible(problem, b.choice)
    if not crossed(problem.value, noisy.value, problem.valid):
        assert np.array_equal(a.choice, b.choice), f"{method}: a decision moved on ±4 ulps of noise"
        assert a.objective == pytest.approx(b.objective, rel=1e-12)
    else:  # a value crossed a grid point: the problems differ by one step; both answers optimal to the grid
        q = value_quantum(problem.value, problem.valid)
        assert abs(a.objective - b.objective) <= len(idx) * q


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[np.ndarray, np.ndarray]]:
    """Record the value matrix given to ``solve_assignment`` for every problem it solves, and what it snapped it to."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    real = assignment.snapped

    def record(problem: AssignmentProblem) -> AssignmentProblem:
        out = real(problem)
        seen.append((problem.value.copy(), out.value.copy()))
        return out

    monkeypatch.setattr(assignment, "snapped", record)
    return seen


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(PROGRAM_POLICIES))
def test_noise_in_goodput_does_not_change_a_policy_decision(
    monkeypatch: pytest.MonkeyPatch, seed: int, name: str
) -> None:
    rng = np.random.default_rng(seed)
    snap = with_twins(random_snapshot(rng, PAPER_12 if seed % 2 else MIXED_12, int(rng.integers(2, 9))))
    noisy = dataclasses.replace(snap, goodput=frozen_array(perturbed(np.asarray(snap.goodput), rng), np.float64))
    seen = _recording(monkeypatch)
    a = make_policy(name, seed=0).decide(snap)
    first = list(seen)
    seen.clear()
    b = make_policy(name, seed=0).decide(noisy)
    assert len(first) == len(seen) >= 1
    valid = np.asarray(snap.valid)
    if not any(crossed(x[0], y[0], valid) for x, y in zip(first, seen, strict=True)):
        assert np.array_equal(a.config, b.config), f"{name}: a decision moved on ±4 ulps of noise in goodput"
    else:
        q = max(value_quantum(x[0], valid) for x in first)
        assert abs(a.objective - b.objective) <= snap.num_jobs * q


@pytest.mark.parametrize("name", PROGRAM_POLICIES)
def test_twins_get_bit_identical_values(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Indistinguishable jobs, wherever they sit in the arrays, get bit-identical rows of values (before and after
    the grid) — the property that lets ties break by the fixed rule rather than by the SIMD lane a job fell in."""
    rng = np.random.default_rng(11)
    seen = _recording(monkeypatch)
    for _ in range(5):
        base = random_snapshot(rng, MIXED_12, 23)  # odd sizes put twins in different SIMD lanes and loop tails
        snap = with_twins(base)
        make_policy(name, seed=0).decide(snap)
        raw, values = seen[-1]
        same = [
            (i, i + 1)
            for i in range(snap.num_jobs - 1)
            if all(
                np.array_equal(np.asarray(getattr(snap, f))[i], np.asarray(getattr(snap, f))[i + 1]) for f in JOB_FIELDS
            )
        ]
        assert same, "the snapshot has twins"
        forced = np.asarray(snap.current) >= 0
        for i, k in same:
            if not (forced[i] or forced[k]):
                assert np.array_equal(raw[i], raw[k]), f"{name}: twins {i} and {k} got different values"
                assert np.array_equal(values[i], values[k])


@pytest.mark.parametrize("method", ["dp", "auto"])
def test_a_tie_keeps_a_job_where_it_is(method: str) -> None:
    """Two jobs, two equally valued configurations each (the second within one ulp of the first): with ``prefer``
    the exact DP keeps each job on the configuration it holds (HiGHS and the price method treat differences below
    their 1e-9 tolerances as ties and break them their own way)."""
    gpus = np.array([2, 2], dtype=np.int64)
    value = np.array([[1.0, np.nextafter(1.0, 2.0)], [0.75, 0.75]])
    valid = np.ones((2, 2), dtype=bool)
    two_types = AssignmentProblem(value, valid, gpus, np.array([0, 1]), np.array([2, 2]))
    for held in ([1, 0], [0, 1], [1, -1]):
        prefer = np.array(held, dtype=np.int64)
        res = solve_assignment(dataclasses.replace(two_types, prefer=prefer), method)
        assert all(res.choice[i] == held[i] for i in range(2) if held[i] >= 0), (held, res.choice)
        assert res.objective == pytest.approx(1.75, rel=1e-12)  # the given values, without the tie bonus
