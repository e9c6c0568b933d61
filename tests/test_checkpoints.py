"""Periodic checkpoints in the simulator (--checkpoint-policy): their cost, the work a failure loses, Young/Daly."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oak.catalog import Catalog
from oak.catalog.checkpoint import DEFAULT_WRITE_S, checkpoint_write_s
from oak.engine.ledger import JobsState
from oak.engine.rules import PhysicsOptions
from oak.errors import OakInputError
from oak.failures import PerJobBernoulli
from oak.failures.hardware import parse_failure_model
from oak.goodput.online import StepTimeLog, fit_online, linear_scaling_prior
from oak.model import JobSpec
from oak.model.cluster import cluster_preset, homogeneous_cluster
from oak.policies import make_policy
from oak.runtime.learned import learned_app
from oak.sim.simulator import Simulator, _Checkpoints
from oak.workloads import Workload, load_workload
from support.cli import oak

C = DEFAULT_WRITE_S  # the job's application is a learned one (not in the write-time table)


def _one() -> tuple[Workload, Catalog]:
    """One job at a constant speed (a single-epoch learned application: 0.5 s per step, 10,000 steps)."""
    log = StepTimeLog()
    log.add(1, 1, 64.0, 0.5 * 20, 20)
    samples = tuple(log.samples())
    params = fit_online(samples, linear_scaling_prior(samples)).params
    base = Catalog.load()
    app = learned_app("job:a", 64, params, samples, 10_000.0, 50.0, "aws")
    spec = JobSpec(name="a", application="job:a", submit_time_s=0.0, min_gpus=1, max_gpus=1, restart_penalty_s=50.0)
    return Workload(name="one", jobs=(spec,)), dataclasses.replace(base, apps={**base.apps, "job:a": app})


def _run(policy: str, log: Path | None = None, rate: float = 0.0) -> tuple[float, float, float]:
    """(JCT, checkpoint GPU-s, T_progress) of the one job alone on one GPU."""
    physics = PhysicsOptions(
        checkpoint_policy=policy, failure_model=f"trace:{log}" if log is not None else "paper", horizon_s=1e8
    )
    wl, catalog = _one()
    r = Simulator(wl, homogeneous_cluster("aws", 1, 4), catalog, physics).run(make_policy("oak"), rate, 0)
    job = r.jobs[0]
    assert job.jct_s is not None
    return job.jct_s, job.gpu_s_ckpt, job.t_progress_s


def test_bad_checkpoint_policies_are_input_errors() -> None:
    for bad in ("sometimes", "fixed:", "fixed:-5", "fixed:x", "young"):
        with pytest.raises(OakInputError, match="checkpoint_policy"):
            PhysicsOptions(checkpoint_policy=bad)
    out = oak("simulate", "--workload", "small", "--checkpoint-policy", "fixed:0")
    assert out.returncode == 2 and "--checkpoint-policy 'fixed:0'" in out.stderr and "Traceback" not in out.stderr


def test_write_times_follow_the_model_state_and_default_for_unknown_applications() -> None:
    assert checkpoint_write_s("bert") > checkpoint_write_s("yolov3") > checkpoint_write_s("cifar10") > 1.0
    assert checkpoint_write_s("job:mine") == DEFAULT_WRITE_S


def test_a_fixed_interval_costs_its_share_of_running_time() -> None:
    """Every S s of running a checkpoint of C s: the job runs at S/(S + C) of its speed, and its checkpoint
    GPU-time is C/(S + C) of its running time; no periodic checkpoint (none) costs nothing."""
    restore = 50.0
    free, ckpt_free, _ = _run("implicit")
    none, ckpt_none, _ = _run("none")
    assert ckpt_free == ckpt_none == 0.0 and none == pytest.approx(free, rel=1e-12)
    jct, ckpt, running = _run("fixed:100")
    assert jct - restore == pytest.approx((free - restore) * (100.0 + C) / 100.0, rel=1e-9)
    assert ckpt == pytest.approx(running * C / (100.0 + C), rel=1e-9)


def test_a_failure_loses_the_running_time_since_the_last_checkpoint(tmp_path: Path) -> None:
    """A crash 250 s into the job's running (after its 50 s restore) with a checkpoint every 100 + C s:
    the last one completed at 2·(100 + C), so 50 − 2C s of running are lost, and the job restores again.
    Without periodic checkpoints all 250 s are lost."""
    log = tmp_path / "log.csv"
    log.write_text("time_s,job,node,kind,down_s\n300,a,,crash,\n")
    base, _, _ = _run("fixed:100")
    crashed, _, _ = _run("fixed:100", log)
    assert crashed - base == pytest.approx(50.0 + (50.0 - 2 * C), rel=1e-9)
    free, _, _ = _run("none")
    lost_all, _, _ = _run("none", log)
    assert lost_all - free == pytest.approx(50.0 + 250.0, rel=1e-9)


def test_lossless_checkpoints_lose_nothing_and_cost_nothing(tmp_path: Path) -> None:
    """The bound of the checkpoint study: no write time (the job runs as without periodic checkpoints) and the
    crash 250 s into its running costs only the restore it triggers (50 s), where every interval loses more."""
    log = tmp_path / "log.csv"
    log.write_text("time_s,job,node,kind,down_s\n300,a,,crash,\n")
    free, _, _ = _run("none")
    base, ckpt, _ = _run("lossless")
    assert base == pytest.approx(free, rel=1e-12) and ckpt == 0.0
    crashed, ckpt, _ = _run("lossless", log)
    assert crashed - base == pytest.approx(50.0, rel=1e-9) and ckpt == 0.0
    interval, _, _ = _run("fixed:100", log)
    assert interval - _run("fixed:100")[0] > crashed - base + 1.0


def test_lossless_checkpoints_lose_nothing_when_the_node_goes_down(tmp_path: Path) -> None:
    """The other failure path (a node's loss, ``_lose_work``): the job's only node down 100 s at 300 s; under
    lossless it resumes where it was, after the repair and its 50 s restore, with no work lost; every 100 s it
    loses the running time since its last checkpoint."""
    log = tmp_path / "node.csv"
    log.write_text("time_s,job,node,kind,down_s\n300,,0,node-loss,100\n")

    def run(policy: str, failing: bool) -> tuple[float, float]:
        physics = PhysicsOptions(
            checkpoint_policy=policy, failure_model=f"trace:{log}" if failing else "paper", horizon_s=1e8
        )
        wl, catalog = _one()
        job = Simulator(wl, homogeneous_cluster("aws", 1, 4), catalog, physics).run(make_policy("oak"), 0.0, 0).jobs[0]
        assert job.jct_s is not None and job.failures == int(failing)
        return job.jct_s, job.gpu_s_lost_work

    (base, _), (down, lost) = run("lossless", False), run("lossless", True)
    assert down - base == pytest.approx(100.0 + 50.0, rel=1e-9) and lost == 0.0
    (base, _), (down, lost) = run("fixed:100", False), run("fixed:100", True)
    assert lost == pytest.approx(50.0 - 2 * C, rel=1e-9)  # 250 s of running, its last checkpoint at 2·(100 + C)
    assert down - base == pytest.approx(150.0 + lost * (100.0 + C) / 100.0, rel=1e-9)  # redone with its writes


def test_young_daly_interval_from_the_failure_rate() -> None:
    """Per-job coin λ per 60 s round: MTBF = 60/λ s, the period √(2·C·MTBF) + C; with λ so small that the job
    never fails, its checkpoint share of running time is exactly C / period."""
    lam = 1e-7
    period = math.sqrt(2.0 * C * 60.0 / lam) + C
    _, ckpt, running = _run("young-daly", rate=lam)
    assert ckpt == pytest.approx(running * C / period, rel=1e-9)


def test_young_daly_counts_a_nodes_observed_failures() -> None:
    """A node that has failed more is believed to fail more (failures + 1 over the time since the start + the
    prior's mean time between failures): a job on it checkpoints more often."""
    wl = load_workload("small")
    hw = parse_failure_model("llama3:scale=1000")
    sim = Simulator(wl, physics=PhysicsOptions(failure_model="llama3:scale=1000"))
    node_rate = float(hw.node_rates(0, 3).mean())
    ck = _Checkpoints(sim.model.physics, PerJobBernoulli(0.0), 0.0, hw, node_rate, 0.0)
    st = JobsState.initial(np.zeros(len(wl.jobs)))
    st.node_failures = np.zeros(3, np.int64)
    st.ckpt_period = np.full(len(wl.jobs), np.inf)
    st.shape[0] = 0
    st.gpus[0] = (0,)
    healthy = ck.failure_rate_s(sim.model, st, 0, 86_400.0)
    assert healthy == pytest.approx(1.0 / (86_400.0 + 1.0 / node_rate), rel=1e-12)
    st.node_failures[0] = 4
    assert ck.failure_rate_s(sim.model, st, 0, 86_400.0) == pytest.approx(5 * healthy, rel=1e-12)
    ck.periods(sim.model, st, 86_400.0)
    c = checkpoint_write_s(wl.jobs[0].application)
    assert st.ckpt_period[0] == pytest.approx(math.sqrt(2 * c / (5 * healthy)) + c, rel=1e-12)


def test_young_daly_loses_less_than_fixed_intervals_on_a_failing_cluster() -> None:
    """medium at λ = 0.05 (a failure every 20 min per running job): lost + checkpoint GPU-hours under the
    advised intervals are below every fixed interval's (10, 30, 60 min)."""

    def cost(policy: str) -> float:
        r = Simulator(load_workload("medium"), physics=PhysicsOptions(checkpoint_policy=policy)).run(
            make_policy("oak"), 0.05, 0
        )
        s = r.summary()
        return float(s["lost_gpu_hours"] + s["checkpoint_gpu_hours"])

    advised = cost("young-daly")
    assert all(advised < cost(f"fixed:{m * 60}") for m in (10, 30, 60))


def test_the_failure_overhead_grows_with_the_nodes_a_configuration_spans() -> None:
    """Under periodic checkpoints the snapshot carries each configuration's failure overhead (checkpoint writes +
    restores and half an interval lost per failure): more nodes fail more often, so it grows with them; under
    implicit checkpoints it is None, and oak uses it only as its ablation (failure_overhead=True)."""
    seen: dict[str, Any] = {}
    for policy in ("implicit", "young-daly"):
        physics = PhysicsOptions(checkpoint_policy=policy, failure_model="llama3:scale=300")
        sim = Simulator(load_workload("small"), cluster_preset("sia-64"), physics=physics)
        sim.run(make_policy("oak"), 0.0, 0, on_round=lambda snap, a, p, k=policy: seen.setdefault(k, snap))
    assert seen["implicit"].failure_overhead is None
    snap = seen["young-daly"]
    over = snap.failure_overhead
    assert over is not None and over.shape == snap.goodput.shape and np.all((over >= 0) & (over <= 0.9))
    nodes = np.array([c.nodes for c in snap.configs])
    row = over[0]
    one, many = row[snap.valid[0] & (nodes == 1)], row[snap.valid[0] & (nodes > 1)]
    assert len(one) and len(many) and many.min() > one.min()
    plain, ablation = make_policy("oak"), make_policy("oak", failure_overhead=True)
    assert not np.array_equal(plain.utility(snap), ablation.utility(snap))  # type: ignore[attr-defined]


def test_lossless_checkpoints_leave_only_the_restores_in_the_failure_overhead() -> None:
    """The same first round under young-daly and lossless: lossless drops the writes and the half interval lost,
    so each configuration's overhead is its failure rate × the job's restore alone — below young-daly's wherever
    that is not capped, and still growing with the nodes a configuration spans."""
    seen: dict[str, Any] = {}
    for policy in ("young-daly", "lossless"):
        physics = PhysicsOptions(checkpoint_policy=policy, failure_model="llama3:scale=300")
        sim = Simulator(load_workload("small"), cluster_preset("sia-64"), physics=physics)
        sim.run(make_policy("oak"), 0.0, 0, on_round=lambda snap, a, p, k=policy: seen.setdefault(k, snap))
    yd, free = seen["young-daly"].failure_overhead, seen["lossless"].failure_overhead
    assert yd is not None and free is not None and yd.shape == free.shape
    valid = seen["lossless"].valid
    assert np.all(free[valid] > 0) and np.all(free[valid & (yd < 0.9)] < yd[valid & (yd < 0.9)])
    nodes = np.array([c.nodes for c in seen["lossless"].configs])
    row = free[0]
    assert row[valid[0] & (nodes > 1)].min() > row[valid[0] & (nodes == 1)].min()


def test_the_advice_stops_checkpoints_that_cannot_pay_before_the_end() -> None:
    """The one job (5,000 s of running) under λ = 10⁻³ per round: Young/Daly checkpoints it all the way; the advice
    spreads its checkpoints over the run left and writes none in its last 2√(C/ρ) s, so it spends less on them."""
    _, ckpt_yd, _ = _run("young-daly", rate=1e-3)
    _, ckpt_advised, _ = _run("advised", rate=1e-3)
    assert 0 < ckpt_advised < ckpt_yd


def _one_job_state(policy: str) -> tuple[Simulator, _Checkpoints, JobsState]:
    wl = load_workload("small")
    sim = Simulator(wl, physics=PhysicsOptions(checkpoint_policy=policy))
    ck = _Checkpoints(sim.model.physics, PerJobBernoulli(0.01), 0.01, parse_failure_model("paper"), 0.0, 0.0)
    st = JobsState.initial(np.zeros(len(wl.jobs)))
    st.node_failures = np.zeros(3, np.int64)
    st.ckpt_period = np.full(len(wl.jobs), np.inf)
    st.shape[0], st.gpus[0] = 0, (0,)
    return sim, ck, st


def test_a_job_keeps_the_checkpoints_it_wrote_when_its_interval_changes() -> None:
    """A job checkpointing every 100 s of running since its start, at 250 s of progress, whose advice becomes "none
    before the end" keeps its checkpoint at 200 s: a failure then loses 50 s, not its whole run."""
    sim, ck, st = _one_job_state("advised")
    st.progress[0] = sim.model.total[0] * (1 - 1e-9)  # about done: no checkpoint pays any more
    st.t_progress[0], st.ckpt_period[0], st.ckpt_tprog[0] = 250.0, 100.0, 0.0
    ck.periods(sim.model, st, 1000.0)
    assert st.ckpt_period[0] == math.inf and st.ckpt_tprog[0] == 200.0


def test_checkpoints_follow_a_timer_across_a_change_of_interval() -> None:
    """Checkpoints every period of running after the last one: a job whose period shrinks keeps its last checkpoint
    at the old period and writes one at once where the new period has passed since (not a checkpoint back in time);
    a failure then loses the running time since the last multiple of the new period after it."""
    sim, ck, st = _one_job_state("young-daly")
    rate = ck.failure_rate_s(sim.model, st, 0, 0.0)
    c = float(sim.model.ckpt_write[0])
    new = math.sqrt(2.0 * c / rate) + c
    for since_old, expect_now in ((2.5 * new, True), (0.5 * new, False)):
        old = 20.0 * new
        st.t_progress[0], st.ckpt_period[0], st.ckpt_tprog[0] = 100.0 + old + since_old, old, 100.0
        ck.periods(sim.model, st, 0.0)
        assert st.ckpt_period[0] == pytest.approx(new, rel=1e-12)
        written = 100.0 + old + (since_old if expect_now else 0.0)
        assert st.ckpt_tprog[0] == pytest.approx(written, rel=1e-12)
    st.t_progress[0] = st.ckpt_tprog[0] + 2.7 * new  # a failure 2.7 periods on loses 0.7 of one
    st.progress[0], st.gpu_lost_work = 1000.0, np.zeros(len(st.done))
    sim._lose_since(st, 0, float(st.ckpt_period[0]), 1.0, timer=True)
    assert st.ckpt_tprog[0] == pytest.approx(100.0 + 20.0 * new + 2.0 * new, rel=1e-12)
