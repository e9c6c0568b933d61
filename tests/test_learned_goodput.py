"""Goodput learned online in the simulator (``--goodput learned``): the scheduler's beliefs start from the
linear-scaling prior of a 1-GPU measurement, are refitted from noisy step times at the sizes a job has run, and
drive every policy; the world's physics stays the truth's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oak.engine.beliefs import Beliefs, rounded
from oak.engine.ledger import JobsState
from oak.engine.model import ClusterModel
from oak.errors import OakInputError
from oak.goodput.throughput import ThroughputParams
from oak.model.cluster import cluster_preset
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.policies import PolicyBase, make_policy
from oak.sim import PhysicsOptions, Simulator, learning
from oak.workloads import load_workload
from support.cli import oak

LEARNED = PhysicsOptions(goodput="learned")


def test_bad_knowledge_is_an_input_error() -> None:
    with pytest.raises(OakInputError, match="goodput"):
        PhysicsOptions(goodput="oracle")
    assert LEARNED.non_default() == {"goodput": "learned"}


def test_choices_of_the_catalogs_own_profile_equal_the_tables() -> None:
    """The uncached path for believed profiles is the same best-batch search (projection included)."""
    model = ClusterModel(load_workload("medium"), cluster_preset("sia-64"))
    for app in {a.name: a for a in model.apps}.values():
        for epoch in (0, app.max_epochs // 2):
            want = model.table.choices(app.name, epoch)
            got = model.table.choices_of(app, epoch, {})
            np.testing.assert_array_equal(got.goodput, want.goodput)
            np.testing.assert_array_equal(got.progress_rate, want.progress_rate)


def test_noise_is_a_pure_function_of_seed_job_and_size() -> None:
    draws = np.array([learning.noise_factor(7, 1234, c) for c in range(4000)])
    assert learning.noise_factor(7, 1234, 3) == draws[3]  # same inputs, same factor
    assert learning.noise_factor(8, 1234, 3) != draws[3]
    z = np.log(draws) / learning.NOISE_SIGMA
    # 4,000 draws of N(0, 1): the mean within 4 standard errors, the deviation within 5 %
    assert abs(z.mean()) < 4 / np.sqrt(len(z)) and abs(z.std() - 1.0) < 0.05


def _running(model: ClusterModel, st: JobsState, i: int, replicas: int) -> int:
    """The fewest-node shape of ``replicas`` GPUs, with job ``i`` marked as having made progress (to put it on)."""
    shape = min((n, s) for (_, n, r), s in model.shape_index.items() if r == replicas)[1]
    st.arrived[i], st.t_progress[i], st.ckpt_tprog[i] = True, 10.0, 0.0
    return shape


def test_beliefs_converge_on_the_sizes_a_job_has_run() -> None:
    """After its smallest size and 2, 4, 8 and 12 GPUs, the believed goodput at those sizes is near the truth: every error
    below 10 % (a sample's noise is 2 %, so 3σ = 6 %, and the believed best batch is chosen where the belief is
    most optimistic) and the mean absolute error below 3 %; one refit per new size, none for a size seen."""
    model = ClusterModel(load_workload("medium"), cluster_preset("paper-12"), physics=LEARNED)
    errors = []
    for seed in range(3):
        for app in ("imagenet", "cifar10"):
            st = JobsState.initial(np.zeros(model.n))
            st.beliefs = Beliefs(model.table, model.apps)
            i = next(k for k, a in enumerate(model.apps) if a.name == app)
            learning.observe(model, st, np.array([i]), seed=seed)  # the bootstrap: its smallest size
            shapes = [_running(model, st, i, r) for r in (2, 4, 8, 12)]
            for s in shapes:
                st.shape[i] = s
                learning.observe(model, st, np.array([i]), seed=seed)
            fits = st.beliefs.jobs[i].fits
            assert fits == len(st.beliefs.jobs[i].seen) >= len(shapes)  # bootstrap + one refit per new size
            learning.observe(model, st, np.array([i]), seed=seed)  # a size measured again adds nothing
            assert st.beliefs.jobs[i].fits == fits
            believed, _ = st.beliefs.rows(np.array([i]), np.array([0]))
            truth = model.table.choices(app, 0).goodput
            errors += [believed[0, s] / truth[s] - 1.0 for s in shapes]
    err = np.abs(np.array(errors))
    assert err.max() < 0.10 and err.mean() < 0.03, errors


class Greedy(PolicyBase):
    """Each job in order takes its largest valid configuration that still fits: blind to goodput."""

    name = "greedy"

    def __init__(self) -> None:
        self.seen: list[RoundSnapshot] = []

    def decide(self, snap: RoundSnapshot) -> Allocation:
        self.seen.append(snap)
        free = np.asarray(snap.capacity).copy()
        out = np.full(snap.num_jobs, -1, dtype=np.int64)
        for j in range(snap.num_jobs):
            ok = snap.valid[j] & (snap.config_gpus <= free[snap.config_type])
            if ok.any():
                c = int(np.flatnonzero(ok)[np.argmax(snap.config_gpus[ok])])
                out[j] = c
                free[snap.config_type[c]] -= snap.config_gpus[c]
        return Allocation(config=out)


def test_a_job_is_offered_one_gpu_first_then_at_most_twice_what_it_ran() -> None:
    spy = Greedy()
    Simulator(load_workload("small"), physics=LEARNED).run(spy, 0.0, 0)
    first_offer: dict[str, int] = {}
    for snap in spy.seen:
        most = np.where(snap.valid, np.asarray(snap.config_gpus)[None, :], 0).max(axis=1)
        assert np.all(most <= snap.max_gpus)
        for name, m in zip(snap.job_names, most.tolist(), strict=True):
            first_offer.setdefault(name, m)
    assert set(first_offer.values()) == {1}
    assert max(int(s.max_gpus.max()) for s in spy.seen) > 1  # and jobs grow


@pytest.mark.parametrize("policy", ["oak", "sia", "pollux"])
def test_learned_runs_are_deterministic_and_finish(policy: str) -> None:
    runs = [Simulator(load_workload("small"), physics=LEARNED).run(make_policy(policy), 0.1, 3) for _ in range(2)]
    assert [j.jct_s for j in runs[0].jobs] == [j.jct_s for j in runs[1].jobs]
    assert [j.restarts for j in runs[0].jobs] == [j.restarts for j in runs[1].jobs]
    assert all(j.jct_s is not None for j in runs[0].jobs)


def test_policies_see_beliefs_while_physics_stays_the_truth() -> None:
    """A goodput-blind policy makes the same decisions whether goodput is known (under the same 1-GPU start and
    2x cap) or learned, so every job finishes at the same time — yet the goodput it was shown differs."""
    wl = load_workload("small")
    known, learned = Greedy(), Greedy()
    r_known = Simulator(wl, physics=PhysicsOptions(bootstrap=True, exploration_cap=True)).run(known, 0.1, 1)
    r_learned = Simulator(wl, physics=LEARNED).run(learned, 0.1, 1)
    assert [j.jct_s for j in r_known.jobs] == [j.jct_s for j in r_learned.jobs]
    assert len(known.seen) == len(learned.seen)
    assert any(not np.array_equal(k.goodput, g.goodput) for k, g in zip(known.seen, learned.seen, strict=True))
    assert any(
        not np.array_equal(k.progress_rate, g.progress_rate) for k, g in zip(known.seen, learned.seen, strict=True)
    )


def test_rounding_keeps_seven_digits() -> None:
    p = ThroughputParams(0.123456789, 1e-7 / 3, 2.0, 3.0, 4.0, 5.0, 1.23456789)
    r = rounded(p)
    assert r.alpha_c == 0.1234568 and r.gamma == 1.234568
    assert dataclasses.astuple(rounded(r)) == dataclasses.astuple(r)


def test_cli_goodput_flag() -> None:
    out = oak("simulate", "--workload", "small", "--policy", "sia", "--goodput", "learned")
    assert out.returncode == 0, out.stderr
    bad = oak("simulate", "--workload", "small", "--goodput", "psychic")
    assert bad.returncode == 2 and "goodput" in bad.stderr and "Traceback" not in bad.stderr
