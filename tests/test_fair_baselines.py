"""DRF and Gavel: max-min fairness, and the finish-time-fairness optimum against brute force."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oak.policies import gavel, make_policy
from oak.policies.drf import drf_shares
from oak.policies.gavel import FtfProblem, alone_ratios, ftf_fractions
from oak.sim import Simulator
from oak.workloads import load_workload
from support.reference_drf import reference_drf_decide, reference_drf_shares


def test_drf_water_filling_hand_made() -> None:
    count, gtype = drf_shares(
        capacity=np.array([12]),
        demand=np.array([1, 8, 8, 8, 8]),
        allowed=np.ones((5, 1), bool),
        order=np.arange(5),
        preferred=np.full(5, -1),
    )
    assert count.tolist() == [1, 3, 3, 3, 2]  # 11 GPUs over four jobs; the leftover goes first in order
    assert gtype.tolist() == [0] * 5


def test_drf_respects_demand_when_cluster_is_large() -> None:
    count, _ = drf_shares(np.array([64]), np.array([2, 4, 8]), np.ones((3, 1), bool), np.arange(3), np.full(3, -1))
    assert count.tolist() == [2, 4, 8]


def test_drf_two_gpu_types_are_two_resources() -> None:
    # Job 0 may only use type 0 (4 GPUs), jobs 1-2 only type 1 (8 GPUs): shares are per type.
    allowed = np.array([[True, False], [False, True], [False, True]])
    count, gtype = drf_shares(np.array([4, 8]), np.array([8, 8, 8]), allowed, np.arange(3), np.full(3, -1))
    assert count.tolist() == [4, 4, 4]
    assert gtype.tolist() == [0, 1, 1]


@given(
    cap=st.integers(1, 32),
    demand=st.lists(st.integers(1, 16), min_size=1, max_size=8),
    seed=st.integers(0, 1000),
)
@settings(max_examples=150, deadline=None)
def test_drf_is_max_min_fair(cap: int, demand: list[int], seed: int) -> None:
    n = len(demand)
    order = np.random.default_rng(seed).permutation(n)
    count, _ = drf_shares(np.array([cap]), np.array(demand), np.ones((n, 1), bool), order, np.full(n, -1))
    assert count.sum() == min(cap, sum(demand))
    assert np.all(count <= demand)
    for j in range(n):
        if count[j] < demand[j]:  # an unsatisfied job is never more than one GPU behind anyone
            assert np.all(count <= count[j] + 1)


@given(
    capacity=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    n_jobs=st.integers(1, 30),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=300, deadline=None)
def test_drf_heap_hands_out_what_the_scan_does(capacity: list[int], n_jobs: int, seed: int) -> None:
    """The heap of ``drf_shares`` against the scan of every job per GPU: the same counts and types, with
    several types (some empty), jobs allowed on some, held and preferred allocations, ties of shares."""
    rng = np.random.default_rng(seed)
    n_types = len(capacity)
    cap = np.array(capacity, dtype=np.int64)
    demand = rng.integers(0, 20, n_jobs)
    allowed = rng.random((n_jobs, n_types)) < 0.7
    order = rng.permutation(n_jobs)
    preferred = np.where(rng.random(n_jobs) < 0.5, rng.integers(0, n_types, n_jobs), -1)
    held = np.where(preferred >= 0, rng.integers(0, 12, n_jobs), 0)
    for h in (held, None):
        got = drf_shares(cap, demand, allowed, order, preferred, h)
        want = reference_drf_shares(cap, demand, allowed, order, preferred, h)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()


def test_drf_policy_decides_as_the_scan_and_full_passes() -> None:
    """``DrfPolicy`` (the heap, the vectorised rounding, jobs that cannot grow not retried) against the
    policy as first written (tests/support/reference_drf.py) on 300 random rounds of three clusters, few jobs
    and many (a job upgraded twice in one round, which only sia-64's multi-node configurations make common,
    is in 2 of them)."""
    from oak.model.cluster import cluster_preset
    from oak.policies.drf import DrfPolicy
    from support.snapshots import MIXED_12, PAPER_12, random_snapshot

    clusters = (MIXED_12, PAPER_12, cluster_preset("sia-64"))
    for seed in range(300):
        rng = np.random.default_rng(seed)
        snap = random_snapshot(rng, clusters[seed % 3], int(rng.integers(1, (8, 40)[seed % 2])))
        snap = dataclasses.replace(snap, max_gpus=rng.integers(0, 40, snap.num_jobs).astype(np.int64))
        got = DrfPolicy().decide(snap)
        want = reference_drf_decide(snap)
        assert np.asarray(got.config).tolist() == np.asarray(want.config).tolist(), seed


def test_gavel_priorities_order_pairs_as_the_loop_did() -> None:
    """``round_priorities`` (one lexsort over all (job, type) pairs) against the loop and tuple sort it replaced
    (tests/support/reference_gavel.py) on 300 random rounds of three clusters, with the round's own fractions
    and with fractions drawn from a few values (ties of priority, broken by deficit, x, job and type); jobs
    that never ran, that ran for a moment and that ran."""
    from oak.model.cluster import cluster_preset
    from oak.policies.gavel import GavelPolicy, ftf_solve, round_priorities
    from support.reference_gavel import reference_round_priorities
    from support.snapshots import MIXED_12, PAPER_12, random_snapshot

    clusters = (MIXED_12, PAPER_12, cluster_preset("sia-64"))
    ties = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        snap = random_snapshot(rng, clusters[seed % 3], int(rng.integers(1, (8, 40)[seed % 2])))
        u = rng.random(snap.num_jobs)  # never ran, ran for a moment (its share of life below 1e-9), ran
        attained = np.where(u < 0.3, 0.0, np.where(u < 0.4, 1e-12, rng.uniform(0, 5e4, snap.num_jobs)))
        snap = dataclasses.replace(snap, attained_gpu_s=attained)
        problem, cfg = GavelPolicy().problem(snap)
        fractions = [ftf_solve(problem)[0], rng.choice([0.0, 0.25, 0.5, 1.0], size=cfg.shape)]
        for x in fractions:
            got, got_values = round_priorities(snap, cfg, x, problem.gpus)
            want, want_values = reference_round_priorities(snap, cfg, x, problem.gpus)
            assert got.tolist() == want.tolist(), seed
            assert got_values.tobytes() == want_values.tobytes(), seed
            keys = got_values[np.isfinite(got_values)]
            ties += len(keys) - len(np.unique(keys))
    assert ties > 100  # the tie-breaks were exercised


def _brute_ftf(problem: FtfProblem, step: float) -> float:
    """The minimum over a grid of time fractions of the maximum finish-time ratio (vectorised)."""
    m, k = problem.throughput.shape
    axis = np.arange(0.0, 1.0 + 1e-9, step)
    x = np.stack(np.meshgrid(*([axis] * (m * k)), indexing="ij"), axis=-1).reshape(-1, m, k)
    ok = np.all(x.sum(axis=2) <= 1 + 1e-9, axis=1)
    ok &= np.all((problem.gpus[None, :, None] * x).sum(axis=1) <= problem.capacity[None, :] + 1e-9, axis=1)
    x = x[ok]
    tau = (problem.throughput[None] * x).sum(axis=2)
    with np.errstate(divide="ignore"):
        finish = problem.age_s[None] + np.where(tau > 0, problem.remaining[None] / tau, np.inf)
    return float((finish / problem.denominators()[None]).max(axis=1).min())


@pytest.mark.parametrize("seed", range(4))
def test_gavel_ftf_attains_brute_force_minimum_one_type(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = 3
    problem = FtfProblem(
        throughput=rng.uniform(0.5, 2.0, size=(m, 1)),
        age_s=rng.uniform(0, 500, size=m),
        remaining=rng.uniform(500, 3000, size=m),
        total=np.full(m, 3000.0),
        overhead_s=np.full(m, 30.0),
        gpus=rng.choice([1, 2, 4], size=m),
        capacity=np.array([4]),
    )
    x, z = ftf_fractions(problem)
    assert problem.ratios(x).max() <= z * (1 + 1e-6)
    brute = _brute_ftf(problem, 0.01)
    assert z <= brute * (1 + 1e-6)  # never worse than any grid point (bisection tolerance 1e-7)
    assert z >= brute * 0.97  # and the grid is fine enough to come close


def test_gavel_ftf_two_types_lp_matches_brute_force() -> None:
    problem = FtfProblem(
        throughput=np.array([[1.0, 2.0], [1.5, 0.5]]),
        age_s=np.array([100.0, 0.0]),
        remaining=np.array([2000.0, 1500.0]),
        total=np.array([2500.0, 1500.0]),
        overhead_s=np.array([30.0, 30.0]),
        gpus=np.array([2, 2]),
        capacity=np.array([2, 2]),
    )
    x, z = ftf_fractions(problem)
    assert problem.ratios(x).max() <= z * (1 + 1e-6)
    brute = _brute_ftf(problem, 0.05)
    assert brute * 0.95 <= z <= brute * (1 + 1e-6)


def _random_ftf(seed: int, contended: bool) -> FtfProblem:
    """A random FTF problem on 2-4 GPU types: ``contended`` (jobs alike, few GPUs: the optimum is set by jobs
    sharing them) or wide-ranging (ages, idle types, jobs larger than a type, jobs with no work left)."""
    rng = np.random.default_rng(seed)
    m, k = int(rng.integers(1, 40)), int(rng.integers(2, 5))
    total = rng.uniform(1e3, 1e4, m) if contended else rng.uniform(1e2, 1e5, m)
    if contended:
        thr = rng.uniform(0.5, 2.0, (m, k)) * rng.uniform(0.5, 2.0, (1, k))
        age, left = rng.uniform(0, 100, m), rng.uniform(0.5, 1.0, m)
        gpus, capacity = rng.choice([1, 2, 4], m), rng.integers(2, 9, k)
    else:
        thr = rng.uniform(0.1, 10.0, (m, k)) * (rng.random((m, k)) < 0.8)
        thr[thr.max(axis=1) == 0, 0] = 1.0
        age = rng.uniform(0, 1e4, m) * (rng.random(m) < 0.7)
        left = rng.uniform(0.0, 1.0, m) * (rng.random(m) < 0.95)
        gpus, capacity = rng.choice([1, 2, 4, 8], m), rng.integers(1, 33, k)
    return FtfProblem(thr, age, total * left, total, rng.uniform(0, 300, m), gpus, capacity)


@pytest.mark.parametrize("contended", [True, False])
@pytest.mark.parametrize("seed", range(40))
def test_gavel_cutting_planes_reach_the_bisections_optimum(seed: int, contended: bool) -> None:
    """On several GPU types the cutting planes converge (no fall-back to the bisection), their X is feasible
    and achieves the ratio they report, and that ratio is the bisection's within both tolerances (1e-7 each);
    no job alone does better than it."""
    problem = _random_ftf(seed, contended)
    denom = problem.denominators()
    found = gavel._ftf_cuts(problem, denom, 1e-7)
    assert found is not None
    x, z = found
    assert np.all(x >= 0) and np.all(x.sum(axis=1) <= 1 + 1e-6)
    assert np.all((problem.gpus[:, None] * x).sum(axis=0) <= problem.capacity + 1e-6)
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = np.where(problem.remaining > 0, problem.ratios(x), problem.age_s / denom)
    assert achieved.max() <= z * (1 + 1e-12)
    assert np.all(alone_ratios(problem, denom) <= z * (1 + 1e-12))
    _, z_bisect = ftf_fractions(problem, method="bisection")
    assert z == pytest.approx(z_bisect, rel=3e-7, abs=1e-11)
    x_auto, z_auto, path = gavel.ftf_solve(problem)  # the policy's path: X from the feasibility LP at that ratio
    assert path == "cuts" and z_auto == pytest.approx(z, rel=2e-7)
    assert np.all((problem.gpus[:, None] * x_auto).sum(axis=0) <= problem.capacity + 1e-6)
    assert gavel._achieved(problem, x_auto, denom).max() <= z_auto * (1 + 1e-3)
    at = gavel._fractions_at(problem, z_auto, denom)
    if at is not None and gavel._achieved(problem, at, denom).max() <= z_auto * (1 + 1e-3):
        assert np.array_equal(x_auto, at)  # X as the bisection's feasibility LP gives it at that ratio


def test_gavel_cutting_planes_with_a_job_that_needs_almost_nothing() -> None:
    """A job with 1e-10 of its work left: its cut, divided by its tiny need, is scaled into what HiGHS accepts
    (else HiGHS rejects the rows and the cuts give up), and the policy's X still serves it — where the
    feasibility LP's absolute tolerance lets the bisection's X leave it at 0 (a ratio of ∞)."""
    for left in (1e-10, 1e-5):
        problem = FtfProblem(
            np.array([[100.0, 50.0], [40.0, 80.0], [60.0, 60.0]]),
            np.array([1e3, 1e3, 1e4]),
            np.array([left, 4e7, 3e7]),
            np.array([1e6, 1e8, 1e8]),
            np.zeros(3),
            np.array([1, 1, 1]),
            np.array([1, 1]),
        )
        denom = problem.denominators()
        assert gavel._ftf_cuts(problem, denom, 1e-7) is not None
        x, z, path = gavel.ftf_solve(problem)
        _, z_bisect = ftf_fractions(problem, method="bisection")
        assert path == "cuts" and z == pytest.approx(z_bisect, rel=3e-7)
        assert gavel._achieved(problem, x, denom).max() <= z * (1 + 1e-6)


def test_alone_ratios_bound_every_feasible_allocation() -> None:
    """A job's ratio alone at its fastest (a fractional knapsack over types) is no more than under any
    feasible X, and is attained by the knapsack's own fractions."""
    rng = np.random.default_rng(3)
    for seed in range(30):
        problem = _random_ftf(seed, contended=seed % 2 == 0)
        m, k = problem.throughput.shape
        denom = problem.denominators()
        bound = alone_ratios(problem, denom)
        x = rng.random((m, k))
        x /= np.maximum(x.sum(axis=1, keepdims=True), 1.0)
        x *= min(1.0, float(np.min(problem.capacity / np.maximum((problem.gpus[:, None] * x).sum(axis=0), 1e-12))))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(problem.remaining > 0, problem.ratios(x), problem.age_s / denom)
        assert np.all(bound <= ratios * (1 + 1e-12))
        one = np.zeros((1, k))  # job 0 alone: fill its fastest types first
        left = 1.0
        for t in np.argsort(-problem.throughput[0], kind="stable"):
            one[0, t] = min(left, problem.capacity[t] / problem.gpus[0], 1.0)
            left -= one[0, t]
        alone = FtfProblem(
            problem.throughput[:1],
            problem.age_s[:1],
            problem.remaining[:1],
            problem.total[:1],
            problem.overhead_s[:1],
            problem.gpus[:1],
            problem.capacity,
        )
        if problem.remaining[0] > 0:
            assert bound[0] == pytest.approx(
                float((alone.age_s[0] + alone.remaining[0] / (alone.throughput * one).sum()) / denom[0])
            )


@pytest.mark.parametrize("name", ["gavel", "drf"])
def test_fair_baselines_run_and_respect_capacity(name: str) -> None:
    sim = Simulator(load_workload("small"))
    rounds = {"n": 0}

    def check(snap: Any, alloc: Any, _placed: Any) -> None:
        rounds["n"] += 1
        assert np.all(alloc.gpus_per_type(snap) <= snap.capacity)

    res = sim.run(make_policy(name), 0.05, 1, on_round=check)
    assert res.finished and rounds["n"] > 10


def test_gavel_runs_jobs_at_their_rigid_demand() -> None:
    sim = Simulator(load_workload("small"))
    seen: list[tuple[int, int]] = []

    def check(snap: Any, alloc: Any, _placed: Any) -> None:
        for j, c in enumerate(alloc.config):
            if c >= 0:
                seen.append((int(snap.config_gpus[c]), int(snap.requested_gpus[j])))

    sim.run(make_policy("gavel"), 0.0, 0, on_round=check)
    assert seen and all(got == want for got, want in seen)


def test_bench_gavel_times_the_cutting_planes_against_the_bisection(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from oak.cli.main import app

    out = tmp_path / "gavel.json"
    res = CliRunner().invoke(app, ["bench", "gavel", "--rounds", "6", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert [r["method"] for r in doc["gavel"]] == ["auto", "bisection"]
    assert doc["gavel"][0]["rounds"] >= 1 and doc["gave_up"] == 0 and doc["max_rel_diff"] <= 3e-7
    assert "speed ratio bisection/auto" in " ".join(res.output.split())
    bad = CliRunner().invoke(app, ["bench", "gavel", "--cluster", "paper-12"])
    assert bad.exit_code == 2 and "one GPU type" in bad.output
    with pytest.raises(ValueError, match="'cuts'"):
        ftf_fractions(_random_ftf(0, True), method="cuts")


@pytest.mark.parametrize("seed", range(25))
def test_rigid_configs_is_rigid_config_for_every_job_and_type(seed: int) -> None:
    """The vectorised lookup the rigid policies use gives, for every job and GPU type, what the one-job
    ``rigid_config`` gives: the valid configuration of that type with the most GPUs within the job's demand
    (the first such on a tie), −1 where none, and the progress rate there."""
    from oak.model.cluster import cluster_preset
    from oak.policies.rigid import rigid_config, rigid_configs
    from support.snapshots import MIXED_12, PAPER_12, random_snapshot

    rng = np.random.default_rng(seed)
    cluster = (MIXED_12, PAPER_12, cluster_preset("sia-64"))[seed % 3]
    snap = random_snapshot(rng, cluster, int(rng.integers(1, 15)))
    demand = rng.integers(0, 40, snap.num_jobs)  # demands above, below and between configurations, and 0
    snap = dataclasses.replace(snap, requested_gpus=demand.astype(np.int64))
    cfg, rate = rigid_configs(snap)
    for j in range(snap.num_jobs):
        for t in range(len(snap.capacity)):
            want = rigid_config(snap, j, t, int(demand[j]))
            assert cfg[j, t] == want
            assert rate[j, t] == (snap.progress_rate[j, want] if want >= 0 else 0.0)
