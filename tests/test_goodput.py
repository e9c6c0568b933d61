"""Tests of the goodput model: throughput, efficiency, best batch search and the cached table."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from oak.catalog import Catalog
from oak.goodput import (
    BatchChoice,
    GoodputTable,
    ThroughputParams,
    best_batch,
    compute_time,
    efficiency,
    gain,
    iteration_time,
    network_time,
    throughput,
)

#: its module-scoped fixtures are built once, on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_goodput")

P = ThroughputParams(alpha_c=0.02, beta_c=7e-4, alpha_n=0.13, beta_n=2.6e-3, alpha_r=0.035, beta_r=1.5e-3, gamma=2.0)


def with_gamma(p: ThroughputParams, gamma: float) -> ThroughputParams:
    return ThroughputParams(p.alpha_c, p.beta_c, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r, gamma)


# --------------------------------------------------------------------------------------------- throughput


def test_network_time_cases_and_broadcasting() -> None:
    nodes = np.array([1, 1, 1, 2, 4])
    replicas = np.array([1, 2, 4, 2, 16])
    tn = network_time(P, nodes, replicas)
    expected = [1e-8, P.alpha_r, P.alpha_r + 2 * P.beta_r, P.alpha_n, P.alpha_n + 14 * P.beta_n]
    np.testing.assert_allclose(tn, expected, rtol=1e-15)
    grid = network_time(P, np.array([[1], [2]]), np.array([[2, 8]]))
    assert grid.shape == (2, 2)
    np.testing.assert_allclose(grid[1, 1], P.alpha_n + 6 * P.beta_n)


def test_iteration_time_is_sum_at_gamma_1_and_max_at_gamma_10() -> None:
    nodes = np.array([1, 2, 4, 1])
    replicas = np.array([4, 8, 16, 2])
    b = np.array([32, 64, 512, 1000])
    s = np.array([0, 1, 3, 0])
    tc = compute_time(P, b)
    tn = network_time(P, nodes, replicas)
    t1 = iteration_time(with_gamma(P, 1.0), nodes, replicas, b, s)
    np.testing.assert_allclose(t1, s * tc + tc + tn, rtol=1e-12)
    t10 = iteration_time(with_gamma(P, 10.0), nodes, replicas, b, s)
    # (a^10 + b^10)^(1/10) lies in [max, 2^0.1 · max]
    lo = s * tc + np.maximum(tc, tn)
    assert np.all(t10 >= lo - 1e-12)
    assert np.all(t10 <= s * tc + 2**0.1 * np.maximum(tc, tn))
    # far from a tie it is ≈ max
    t_far = iteration_time(with_gamma(P, 10.0), 1, 1, 1000, 0)
    np.testing.assert_allclose(t_far, compute_time(P, 1000), rtol=1e-9)


def test_gamma_norm_has_no_overflow_for_small_times() -> None:
    p = ThroughputParams(1e-5, 1e-9, 1e-5, 0.0, 1e-5, 0.0, 10.0)
    t = iteration_time(p, 2, 8, 4, 0)
    assert math.isfinite(float(t)) and float(t) > 1e-5


def test_throughput_is_samples_over_iteration_time() -> None:
    x = throughput(P, 2, 8, 100, 2)
    t = iteration_time(P, 2, 8, 100, 2)
    np.testing.assert_allclose(x, 8 * 100 * 3 / t, rtol=1e-15)


def test_params_array_round_trip() -> None:
    assert ThroughputParams.from_array(P.as_array()) == P
    with pytest.raises(ValueError):
        ThroughputParams.from_array([1.0, 2.0])


# --------------------------------------------------------------------------------------------- efficiency


def test_efficiency_is_one_at_m0_and_matches_noise_scale_closed_form() -> None:
    m0 = 128.0
    sqr = np.array([0.5, 2.0, 10.0, 0.01])
    var = np.array([1.0, 0.3, 50.0, 4.0])
    np.testing.assert_allclose(efficiency(sqr, var, m0, m0), 1.0, rtol=1e-15)
    phi = m0 * var / sqr
    for m in (128.0, 256.0, 1000.0, 4096.0):
        np.testing.assert_allclose(efficiency(sqr, var, m0, m), (phi + m0) / (phi + m), rtol=1e-12)
        np.testing.assert_allclose(gain(sqr, var, m0, m), efficiency(sqr, var, m0, m) * m / m0, rtol=1e-15)
    e = efficiency(sqr[:, None], var[:, None], m0, np.array([128.0, 512.0, 4096.0])[None, :])
    assert np.all(np.diff(e, axis=1) < 0.0)


def test_efficiency_clips_statistics() -> None:
    # negative sqr is clipped to 0: pure noise, every sample counts, E = 1
    np.testing.assert_allclose(efficiency(-1.0, 2.0, 10.0, 80.0), 1.0)
    # var clipped to 1e-6: almost no noise, E ≈ 1/S
    np.testing.assert_allclose(efficiency(1.0, -5.0, 10.0, 80.0), (1e-6 + 1.0) / (1e-6 + 8.0))


# --------------------------------------------------------------------------------------------- best batch


Stat = Callable[[np.ndarray], np.ndarray]


def _linear_stat(batches: np.ndarray, values: np.ndarray) -> Stat:
    def f(m: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.interp(m, batches, values)
        return out

    return f


def _loop_best_batch(
    p: ThroughputParams,
    m0: float,
    m_max: float,
    b_min: float,
    b_max: float,
    sqr_at: Stat,
    var_at: Stat,
    n: int,
    r: int,
) -> tuple[float, int, int]:
    """Straightforward scalar re-implementation of the 50-point grid (reference §2.4)."""
    m_lo = max(m0, b_min * r)
    if m_lo > m_max:
        return 0.0, 0, 0
    best = (0.0, 0, 0)
    for m in np.geomspace(m_lo, m_max, 50):
        local = m / r
        s = math.ceil(local / b_max - 1e-8) - 1
        if r == 1 and local > m0:
            s = max(s, 1)
        b = math.ceil(local / (s + 1) - 1e-8)
        if r * b * (s + 1) > m_max:
            b = math.floor(m_max / (r * (s + 1)) + 1e-8)
        if not b_min <= b <= b_max:
            continue
        mm = np.array(float(r * b * (s + 1)))
        t = float(iteration_time(p, n, r, b, s))
        good = r * b * (s + 1) / t * float(efficiency(sqr_at(mm), var_at(mm), m0, mm))
        if good > best[0]:
            best = (good, b, s)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_best_batch_matches_loop_reimplementation_and_respects_limits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = ThroughputParams(
        alpha_c=float(rng.uniform(0.005, 0.3)),
        beta_c=float(10 ** rng.uniform(-6, -2)),
        alpha_n=float(rng.uniform(0.01, 1.0)),
        beta_n=float(10 ** rng.uniform(-5, -2)),
        alpha_r=float(rng.uniform(0.005, 0.3)),
        beta_r=float(10 ** rng.uniform(-5, -2)),
        gamma=float(rng.uniform(1.0, 4.0)),
    )
    m0 = float(rng.choice([8, 12, 20, 128, 200]))
    m_max = m0 * float(rng.choice([16, 32, 64]))
    b_min = float(max(1, int(m0 // 4)))
    b_max = float(int(m0 * rng.choice([1, 2, 8])))
    batches = np.geomspace(m0, m_max, 5)
    sqr_at = _linear_stat(batches, rng.uniform(0.1, 5.0, 5))
    var_at = _linear_stat(batches, rng.uniform(0.1, 500.0, 5))
    nodes = np.array([1, 1, 1, 1, 2, 2, 3, 4, 8, 16, 16])
    replicas = np.array([1, 2, 3, 4, 2, 8, 12, 16, 32, 64, 200])
    ch = best_batch(p, m0, m_max, b_min, b_max, sqr_at, var_at, nodes, replicas)
    assert isinstance(ch, BatchChoice)
    for k, (n, r) in enumerate(zip(nodes, replicas, strict=True)):
        good, b, s = _loop_best_batch(p, m0, m_max, b_min, b_max, sqr_at, var_at, int(n), int(r))
        assert ch.goodput[k] == pytest.approx(good, rel=1e-12, abs=0.0)
        assert (int(ch.local_bsz[k]), int(ch.accum_steps[k])) == (b, s)
        if good > 0.0:
            m_lo = max(m0, b_min * r)
            assert b_min <= ch.local_bsz[k] <= b_max
            assert ch.batch[k] == r * ch.local_bsz[k] * (ch.accum_steps[k] + 1)
            assert m_lo - 1e-9 <= ch.batch[k] <= m_max
            assert ch.iter_time_s[k] == pytest.approx(
                float(iteration_time(p, n, r, ch.local_bsz[k], ch.accum_steps[k])), rel=1e-12
            )
            assert ch.progress_rate[k] == pytest.approx(ch.goodput[k] / m0, rel=1e-9)
        else:
            assert ch.progress_rate[k] == 0.0 and ch.batch[k] == 0 and ch.iter_time_s[k] == 0.0
    # 200 replicas cannot fit b_min each under m_max for these settings: infeasible
    assert ch.goodput[-1] == 0.0 or b_min * 200 <= m_max


def test_best_batch_forces_accumulation_on_one_gpu_and_marks_infeasible() -> None:
    def flat(m: np.ndarray) -> np.ndarray:
        return np.full_like(m, 1.0)

    def noisy(m: np.ndarray) -> np.ndarray:
        return np.full_like(m, 1e4)  # huge noise scale: large batches are efficient

    ch = best_batch(P, 128, 4096, 32, 1024, flat, noisy, np.array([1, 1, 0]), np.array([1, 64, 0]))
    assert ch.batch[0] > 128 and ch.accum_steps[0] >= 1  # R = 1, ℓ > M0 ⇒ s ≥ 1
    assert ch.goodput[1] > 0.0 and ch.local_bsz[1] == 64  # M_lo = 32·64 ≤ 4096 ≤ 64·b_max
    assert ch.goodput[2] == 0.0 and not ch.feasible[2]  # R = 0
    over = best_batch(P, 128, 4096, 32, 1024, flat, noisy, 4, 256)  # M_lo = 8192 > M_max
    assert over.goodput.shape == () and float(over.goodput) == 0.0


# --------------------------------------------------------------------------------------------- catalog-based


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def test_cifar10_speedups_direction_early_vs_late(catalog: Catalog) -> None:
    """Qualitative shape of reference §2.4: late-training gradients make scaling pay off; early it does not."""
    nodes = np.array([1, 1, 1, 2])
    replicas = np.array([1, 2, 4, 8])
    table = GoodputTable(catalog, nodes, replicas, ["aws"] * 4)
    last = catalog.apps["cifar10"].max_epochs - 1
    early = table.choices("cifar10", 0).goodput
    late = table.choices("cifar10", last).goodput
    s_early = early / early[0]
    s_late = late / late[0]
    assert np.all(s_late[1:] > s_early[1:])
    assert s_early[3] < s_early[2]  # early, 2 nodes × 4 GPUs is worse than 1 node × 4 GPUs
    assert np.all(np.diff(s_late) > 0.0)  # late, more GPUs keep helping up to 8
    assert 1.0 < s_early[1] < 2.0 and 1.5 < s_late[1] <= 2.0 + 1e-9


def test_goodput_table_matches_best_batch_and_caches(catalog: Catalog) -> None:
    nodes = np.array([1, 1, 2, 1, 1, 2, 1])
    replicas = np.array([1, 4, 8, 1, 8, 16, 2])
    types = ["aws", "aws", "aws", "dgx-ext", "dgx-ext", "dgx-ext", "tpu"]
    table = GoodputTable(catalog, nodes, replicas, types)
    app = catalog.apps["imagenet"]
    ch = table.choices("imagenet", 10)
    assert ch.goodput.shape == (7,)
    assert table.choices("imagenet", 10) is ch  # cached
    assert ch.goodput[6] == 0.0  # no profile for this GPU type
    assert table.has_profile("imagenet", "aws") and not table.has_profile("imagenet", "tpu")
    assert not table.has_profile("nope", "aws")
    assert np.all(ch.goodput[:6] > 0.0)
    with pytest.raises(ValueError):
        ch.goodput[0] = 1.0  # shared cache entries are read-only
    for t, idx in (("aws", [0, 1, 2]), ("dgx-ext", [3, 4, 5])):
        gpu = app.gpus[t]
        direct = best_batch(
            gpu.params,
            app.m0,
            app.m_max,
            gpu.b_min,
            gpu.b_max,
            lambda m: app.grad_stats(10, m)[0],
            lambda m: app.grad_stats(10, m)[1],
            nodes[idx],
            replicas[idx],
        )
        np.testing.assert_array_equal(ch.goodput[idx], direct.goodput)
        np.testing.assert_array_equal(ch.local_bsz[idx], direct.local_bsz)
        np.testing.assert_array_equal(ch.accum_steps[idx], direct.accum_steps)
    # epochs beyond the end are clipped to the last one
    assert table.choices("imagenet", 10_000) is table.choices("imagenet", app.max_epochs - 1)
    with pytest.raises(KeyError):
        table.choices("unknown-app", 0)
    with pytest.raises(ValueError):
        GoodputTable(catalog, nodes, replicas[:3], types)


@pytest.mark.portable  # the same values on any CPU kernel: a subset's arrays are shorter than the table's
@pytest.mark.parametrize("preset", ["paper-12", "sia-64", "sia-64x8"])
def test_a_subset_of_the_table_gives_its_configurations_values_bit_for_bit(preset: str, catalog: Catalog) -> None:
    """A simulator computes rows on its configurations' shapes only (``GoodputTable.subset``): every application's
    goodput and progress rate there, at every epoch, equal the full table's (projected types included)."""
    from oak.engine.model import ClusterModel
    from oak.model.cluster import cluster_preset
    from oak.workloads import load_workload

    model = ClusterModel(load_workload("medium"), cluster_preset(preset), catalog)
    full = model.table
    cols = model.config_shape
    part = full.subset(cols)
    assert part.size == len(cols) < full.size
    for app, profile in catalog.apps.items():
        for epoch in sorted({0, 1, profile.max_epochs // 2, profile.max_epochs - 1}):
            want, got = full.choices(app, epoch), part.choices(app, epoch)
            assert np.array_equal(want.goodput[cols], got.goodput), (app, epoch)
            assert np.array_equal(want.progress_rate[cols], got.progress_rate), (app, epoch)
            assert np.array_equal(want.batch[cols], got.batch), (app, epoch)


def test_job_epochs_kept_between_calls_equal_the_profiles_epoch_of(catalog: Catalog) -> None:
    """JobTables keeps each job's epoch with the progress interval it holds over: across calls with progress that
    grows, jumps past thresholds, falls back (work lost to a failure) and restarts at 0 (a new run), for any subset
    of jobs, every answer equals the application's ``epoch_of``."""
    from oak.engine.model import ClusterModel
    from oak.workloads import load_workload

    model = ClusterModel(load_workload("medium"), catalog=catalog)
    tables, apps, total = model.tables, model.apps, model.total
    rng = np.random.default_rng(5)
    progress = np.zeros(model.n)
    for step in range(400):
        if step % 100 == 0:
            progress[:] = 0.0  # a new run of the same model
        progress += rng.uniform(0.0, 0.02, model.n) * total
        fall = rng.random(model.n) < 0.05
        progress[fall] *= rng.uniform(0.5, 1.0, int(fall.sum()))
        progress = np.minimum(progress, total * 1.1)
        idx = np.sort(rng.choice(model.n, size=int(rng.integers(1, model.n + 1)), replace=False))
        got = tables.epochs(idx, progress[idx])
        want = [apps[i].epoch_of(float(progress[i])) for i in idx.tolist()]
        assert got.tolist() == want
