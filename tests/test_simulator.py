"""Simulator invariants: capacity, one configuration per job, monotone progress, determinism, pairing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from oak.errors import OakInputError
from oak.model.job import JobSpec
from oak.policies import make_policy
from oak.sim import PhysicsOptions, Simulator
from oak.workloads import Workload, load_workload

#: its module-scoped fixtures are built once, on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_simulator")


@pytest.fixture(scope="module")
def small_sim() -> Simulator:
    return Simulator(load_workload("small"))


def test_capacity_and_single_configuration_every_round(small_sim: Simulator) -> None:
    seen = {"rounds": 0}

    def check(snap: Any, alloc: Any, placed: list[tuple[int, ...]]) -> None:
        seen["rounds"] += 1
        choice = alloc.config
        assert choice.shape == (snap.num_jobs,)  # one configuration (or none) per job
        assert np.all(alloc.gpus_per_type(snap) <= snap.capacity)
        gpus = [g for p in placed for g in p]
        assert len(gpus) == len(set(gpus)), "a GPU was given to two jobs"
        for c, p in zip(choice, placed, strict=True):
            assert len(p) == (snap.config_gpus[c] if c >= 0 else 0)

    for name in ("oak", "sia", "goodput"):
        small_sim.run(make_policy(name), failure_rate=0.1, seed=3, on_round=check)
    assert seen["rounds"] > 30


def test_progress_is_monotone_without_lost_work(small_sim: Simulator) -> None:
    last: dict[str, float] = {}

    def check(snap: Any, _alloc: Any, _placed: Any) -> None:
        for name, tp in zip(snap.job_names, snap.t_progress_s, strict=True):
            assert tp >= last.get(name, 0.0) - 1e-9
            last[name] = float(tp)

    res = small_sim.run(make_policy("oak"), failure_rate=0.1, seed=1, on_round=check)
    assert res.finished
    for j in res.jobs:
        assert j.jct_s is not None and j.jct_s >= j.t_progress_s - 1e-6


@pytest.mark.portable
def test_same_seed_bit_identical(small_sim: Simulator) -> None:
    a = small_sim.run(make_policy("oak"), failure_rate=0.1, seed=7).to_json()
    b = Simulator(load_workload("small")).run(make_policy("oak"), failure_rate=0.1, seed=7).to_json()
    for run in (a, b):
        for key in ("wall_s", "decision_ms_mean", "decision_ms_p95", "decision_ms_max"):
            run.pop(key)
    assert a == b


def test_different_seeds_differ_under_failures(small_sim: Simulator) -> None:
    a = small_sim.run(make_policy("oak"), failure_rate=0.1, seed=1)
    b = small_sim.run(make_policy("oak"), failure_rate=0.1, seed=2)
    assert [j.failures for j in a.jobs] != [j.failures for j in b.jobs]


@pytest.mark.portable
def test_failures_are_paired_across_policies(small_sim: Simulator) -> None:
    """Each failure happens at a time drawn from (seed, job, interval) alone: every failure time any policy
    sees lies in the shared stream, and the stream is identical whatever the policy."""
    from oak.failures import rng

    seed, lam = 5, 0.1
    events: dict[str, list[tuple[str, float]]] = {}
    for name in ("oak", "sia", "goodput"):
        got: list[tuple[str, float]] = []
        prev: dict[str, int] = {}

        def watch(snap: Any, _a: Any, _p: Any, got: list[tuple[str, float]] = got, prev: dict[str, int] = prev) -> None:
            for job, f in zip(snap.job_names, snap.failures, strict=True):
                if f > prev.get(job, 0):
                    got.append((job, snap.time_s))
                prev[job] = int(f)

        small_sim.run(make_policy(name), failure_rate=lam, seed=seed, on_round=watch)
        events[name] = got
    keys = {j.name: rng.job_key(j.name) for j in small_sim.model.workload.jobs}
    for got in events.values():
        assert got, "expected failures at λ = 0.1"
        for job, t in got:
            k = int(t // 60.0 + 1e-9)
            u = rng.uniforms(seed, rng.STREAM_FAILURE, [keys[job]], k)[0]
            v = rng.uniforms(seed, rng.STREAM_FAILURE_OFFSET, [keys[job]], k)[0]
            assert u < lam
            assert t == pytest.approx((k + v) * 60.0)
    # The same (job, time) event appears for every policy whenever the job was running then; at least the
    # early failures, before schedules diverge, coincide.
    firsts = {name: got[0] for name, got in events.items()}
    assert len(set(firsts.values())) == 1


def test_lost_work_option_costs_time(small_sim: Simulator) -> None:
    base = small_sim.run(make_policy("oak"), 0.1, 2)
    lossy = Simulator(load_workload("small"), physics=PhysicsOptions(lost_work="since-checkpoint")).run(
        make_policy("oak"), 0.1, 2
    )
    assert sum(j.gpu_s_lost for j in lossy.jobs) > sum(j.gpu_s_lost for j in base.jobs)


def test_restore_time_is_charged_to_t_ckpt(small_sim: Simulator) -> None:
    res = small_sim.run(make_policy("oak"), 0.0, 0)
    for j in res.jobs:
        assert j.t_ckpt_s >= 25.0 - 1e-9  # at least the first start's restore delay


def test_infeasible_bounds_rejected() -> None:
    wl = Workload("bad", (JobSpec("j", "cifar10", 0.0, min_gpus=13, max_gpus=16),))
    with pytest.raises(OakInputError, match="admit no feasible configuration"):
        Simulator(wl)


def test_failure_rate_validated(small_sim: Simulator) -> None:
    with pytest.raises(OakInputError, match="failure rate"):
        small_sim.run(make_policy("oak"), failure_rate=1.5)


def test_restoring_job_loses_no_work_at_a_failure() -> None:
    """Every (re)start begins from a checkpoint, so a job that fails while restoring has made no progress
    since its last checkpoint and must lose none (lost-work physics)."""
    sim = Simulator(load_workload("small"), physics=PhysicsOptions(lost_work="since-checkpoint"))
    prev: dict[str, tuple[bool, float, int]] = {}
    violations: list[str] = []

    def check(snap: Any, _alloc: Any, _placed: Any) -> None:
        for name, restoring, tp, f in zip(
            snap.job_names, snap.restoring, snap.t_progress_s, snap.failures, strict=True
        ):
            if name in prev:
                was_restoring, was_tp, was_f = prev[name]
                if was_restoring and f > was_f and tp < was_tp - 1e-9:
                    violations.append(f"{name} at {snap.time_s}")
            prev[name] = (bool(restoring), float(tp), int(f))

    for seed in range(6):
        prev.clear()
        sim.run(make_policy("oak"), failure_rate=0.2, seed=seed, on_round=check)
    assert not violations, violations[:5]
