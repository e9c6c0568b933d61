"""Invariants of every registered policy, and the age key's starvation guard (docs/reliability.md, "Invariants").

1. Over random round snapshots (1-12 jobs, the paper-12 cluster and a two-type cluster, extreme counters),
   every policy returns a feasible allocation: at most one valid configuration per job within per-type
   capacity, or (replica policies) replicas within node capacity, on one GPU type, with a feasible shape.
   OAK's exact-MILP family additionally never leaves a job unallocated beside idle GPUs that would fit a
   configuration worth more than μ_na. ``utility_matrix`` is finite and ≥ 0.
2. The starvation guard: a waiting job is admitted at the first round at which
   T_queue > T* = ln(μ_na / (G·r)^p) / α, provided (G·r)^p·K_max > μ_na, and never when
   (G·r)^p·K_max ≤ μ_na; checked on single snapshots and inside simulations under adversarial failures.
"""

from __future__ import annotations

import dataclasses
import math
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from oak.engine.rules import PhysicsOptions
from oak.model.cluster import Cluster
from oak.model.snapshot import Allocation, RoundSnapshot, frozen_array
from oak.policies import make_policy, policy_names
from oak.policies.base import PolicyBase
from oak.policies.oak import OakPolicy
from oak.scoring import RestartFactor, UtilityParams, restart_factor_decomposed, utility_matrix
from oak.sim import Simulator
from oak.workloads import load_workload
from support.snapshots import MIXED_12, PAPER_12, random_snapshot, uniform_goodput

#: Counters (seconds, GPU-seconds) as they may reach a policy: zero, tiny, ordinary and huge.
EXTREME = (0.0, 1e-9, 1.0, 30.0, 1e9)
counter = st.one_of(st.sampled_from(EXTREME), st.floats(0.0, 1e9))
#: Budgets small enough for hypothesis; the invariants do not depend on the search budget.
POLICY_OVERRIDES: dict[str, dict[str, Any]] = {
    "pollux": {"population": 6, "generations": 3},
    "hybrid-oak": {"population": 8, "generations": 4},
}
#: Policies that solve OAK's per-round MILP exactly (DP on these clusters).
EXACT_OAK = ("oak-paper", "goodput", "oak-no-age", "oak-no-restart", "oak-aggregate")
#: a user's plug-in (docs/policies.md) must meet the same invariants as the built-ins
EXAMPLE_PLUGIN = f"{Path(__file__).resolve().parents[1] / 'examples' / 'my_policy.py'}:ShortestRemainingFirst"
POLICIES = {name: make_policy(name, **POLICY_OVERRIDES.get(name, {})) for name in (*policy_names(), EXAMPLE_PLUGIN)}


# ---------------------------------------------------------------- snapshots


def _first_fit(cluster: Cluster, snap: RoundSnapshot, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Place each chosen configuration on whole free nodes / one node's free GPUs (first fit); jobs that do not
    fit lose their configuration. Returns (feasible choice, GPUs held per (job, node))."""
    free = np.array([n.gpus for n in cluster.nodes])
    kinds = [snap.gpu_types.index(n.gpu_type) for n in cluster.nodes]
    held = np.zeros((len(choice), len(free)), dtype=np.int64)
    out = np.full(len(choice), -1, dtype=np.int64)
    for j, c in enumerate(choice.tolist()):
        if c < 0:
            continue
        cfg, t = snap.configs[c], int(snap.config_type[c])
        nodes = [k for k in range(len(free)) if kinds[k] == t]
        if cfg.nodes == 1:
            fit = [k for k in nodes if free[k] >= cfg.gpus]
            take = {fit[0]: cfg.gpus} if fit else {}
        else:
            whole = [k for k in nodes if free[k] == cluster.nodes[k].gpus]
            take = {k: int(free[k]) for k in whole[: cfg.nodes]} if len(whole) >= cfg.nodes else {}
        if take:
            out[j] = c
            for k, g in take.items():
                free[k] -= g
                held[j, k] = g
    return out, held


@st.composite
def snapshots(draw: st.DrawFn, *, node_goodput: bool = False) -> RoundSnapshot:
    """A random snapshot: test_hybrid's random goodput and validity, counters drawn from ``EXTREME``, job bounds
    and demands, a feasible current allocation (with its replicas per node) and, if asked, Pollux's node goodput."""
    cluster = draw(st.sampled_from([PAPER_12, MIXED_12]))
    j = draw(st.integers(1, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = random_snapshot(rng, cluster, j)
    sizes = np.array(sorted(set(base.config_gpus.tolist())))
    lo = np.array(draw(st.lists(st.sampled_from(sizes.tolist()), min_size=j, max_size=j)))
    hi = np.maximum(lo, np.array(draw(st.lists(st.sampled_from(sizes.tolist()), min_size=j, max_size=j))))
    req = np.clip(np.array(draw(st.lists(st.integers(1, 12), min_size=j, max_size=j))), lo, hi)
    gpus = base.config_gpus[None, :]
    bounds = (gpus >= lo[:, None]) & (gpus <= hi[:, None])
    valid = base.valid & bounds
    for i in np.flatnonzero(~valid.any(axis=1)):  # every job keeps a valid configuration within its bounds
        valid[i, rng.choice(np.flatnonzero(bounds[i]))] = True
    raw = np.where(valid, base.goodput, 0.0) + np.where(valid & (base.goodput == 0), 1.0, 0.0)
    good = np.where(valid, raw / np.where(valid, raw, np.inf).min(axis=1, keepdims=True), 0.0)
    vec = st.lists(counter, min_size=j, max_size=j)
    tp, tc, tq, extra, attained = (np.array(draw(vec)) for _ in range(5))
    restarts = np.array(draw(st.lists(st.sampled_from([0, 1, 3, 10**6, 10**9]), min_size=j, max_size=j)))
    penalty = np.array(draw(st.lists(st.sampled_from([0.0, 1e-9, 30.0, 250.0, 1e9]), min_size=j, max_size=j)))
    total = np.array(draw(st.lists(st.sampled_from([1e-9, 1.0, 5e3, 1e9]), min_size=j, max_size=j)))
    # remaining work > 0, as for every active job of the simulator (see test_gavel_with_no_work_left_terminates)
    left = np.array(draw(st.lists(st.sampled_from([1e-9, 0.5, 1.0]), min_size=j, max_size=j)))
    wanted = np.array([rng.choice(np.flatnonzero(valid[i])) if rng.random() < 0.6 else -1 for i in range(j)])
    current, held = _first_fit(cluster, base, wanted)
    ng = None
    if node_goodput:
        ng = uniform_goodput(cluster, j) * rng.uniform(0.2, 5.0, (j, 1, 1, 1))
        ng *= rng.random(ng.shape) < 0.8  # some shapes infeasible
    return dataclasses.replace(
        base,
        goodput=frozen_array(good, np.float64),
        valid=frozen_array(valid, bool),
        t_progress_s=frozen_array(tp, np.float64),
        t_ckpt_s=frozen_array(tc, np.float64),
        t_queue_s=frozen_array(tq, np.float64),
        age_s=frozen_array(tp + tc + tq + extra, np.float64),
        restarts=frozen_array(restarts, np.int64),
        failures=frozen_array(restarts // 2, np.int64),
        current=frozen_array(current, np.int64),
        restoring=frozen_array((current >= 0) & (rng.random(j) < 0.3), bool),
        restart_penalty_s=frozen_array(penalty, np.float64),
        attained_gpu_s=frozen_array(attained, np.float64),
        min_gpus=frozen_array(lo, np.int64),
        max_gpus=frozen_array(hi, np.int64),
        requested_gpus=frozen_array(req, np.int64),
        progress_rate=frozen_array(good * rng.uniform(0.1, 10.0, (j, 1)), np.float64),
        remaining_work=frozen_array(total * left, np.float64),
        total_work=frozen_array(total, np.float64),
        current_replicas=frozen_array(held, np.int64),
        node_goodput=None if ng is None else frozen_array(ng, np.float64),
    )


# ---------------------------------------------------------------- 1. feasibility of every policy


def check_allocation(snap: RoundSnapshot, alloc: Allocation) -> None:
    """The simulator's acceptance rules (``Simulator.plan``), stated independently."""
    j = snap.num_jobs
    if alloc.replicas is not None:
        rep = np.asarray(alloc.replicas)
        assert rep.shape == (j, len(snap.node_gpus)) and np.all(rep >= 0), "replicas: one row per job, >= 0"
        assert np.all(rep.sum(axis=0) <= snap.node_gpus), "replicas within each node's GPUs"
        assert snap.node_goodput is not None
        for i in range(j):
            used = np.flatnonzero(rep[i])
            if len(used) == 0:
                continue
            types = set(snap.node_type[used].tolist())
            assert len(types) == 1, f"job {i} spans GPU types {types}"
            t, n, r = types.pop(), len(used), int(rep[i].sum())
            assert snap.min_gpus[i] <= r <= snap.max_gpus[i], f"job {i}: {r} GPUs outside its bounds"
            assert n <= 16 and r <= 64
            assert snap.node_goodput[i, t, n, r] > 0, f"job {i}: shape (type {t}, {n} nodes, {r} GPUs) infeasible"
        return
    x = np.asarray(alloc.config)
    assert x.shape == (j,) and np.issubdtype(x.dtype, np.integer), "one configuration index per job"
    assert np.all((x >= -1) & (x < snap.num_configs)), "configuration indices in range"
    on = np.flatnonzero(x >= 0)
    assert np.all(snap.valid[on, x[on]]), "only valid configurations"
    assert np.all(alloc.gpus_per_type(snap) <= snap.capacity), "GPUs per type within capacity"


def unadmitted_gain(snap: RoundSnapshot, x: np.ndarray, params: UtilityParams) -> float:
    """The largest U − μ_na of a configuration of an unallocated job that fits the GPUs ``x`` leaves idle."""
    u = utility_matrix(snap, params)
    used = np.zeros(len(snap.capacity), dtype=np.int64)
    np.add.at(used, snap.config_type[x[x >= 0]], snap.config_gpus[x[x >= 0]])
    fits = snap.valid & (snap.config_gpus <= (snap.capacity - used)[snap.config_type])[None, :]
    gain = np.where(fits & (x < 0)[:, None], u - params.mu_na, -np.inf)
    return float(gain.max())


@pytest.mark.parametrize("name", list(POLICIES), ids=lambda n: "plugin:srtf" if n == EXAMPLE_PLUGIN else n)
@given(data=st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_every_policy_returns_a_feasible_allocation(name: str, data: st.DataObject) -> None:
    policy = POLICIES[name]
    snap = data.draw(snapshots(node_goodput=policy.needs_node_goodput))
    alloc = policy.decide(snap)
    check_allocation(snap, alloc)
    if name == "oak":
        # the product never idles GPUs beside a waiting job that fits them: every valid allocation is worth
        # U − θ ≥ 1 − θ > 0 (exact optimum; forced restores only keep configurations already held)
        used = alloc.gpus_per_type(snap)
        fits = snap.valid & (snap.config_gpus <= (snap.capacity - used)[snap.config_type])[None, :]
        assert not fits[alloc.config < 0].any(), "a job waits beside idle GPUs it fits"
    if name in EXACT_OAK:
        assert isinstance(policy, OakPolicy)
        # exact optimum ⇒ no idle GPUs beside a waiting job worth more than μ_na there (tolerance: fp sums)
        scale = 1e-9 * max(1.0, float(np.abs(utility_matrix(snap, policy.params)).max()) * snap.num_jobs)
        assert unadmitted_gain(snap, alloc.config, policy.params) <= scale


@pytest.mark.parametrize("name", list(POLICIES), ids=lambda n: "plugin:srtf" if n == EXAMPLE_PLUGIN else n)
@given(data=st.data())
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_a_kept_policy_state_survives_json(name: str, data: st.DataObject) -> None:
    """``PolicyBase.state_to_json`` over every policy: where a policy keeps its state across a runtime restart, the
    state it returns after two rounds is JSON and comes back equal; where it does not, the hook says None."""
    import json

    policy = POLICIES[name]
    snap = data.draw(snapshots(node_goodput=policy.needs_node_goodput))
    state = policy.decide(snap).state
    state = policy.decide(dataclasses.replace(snap, policy_state=state, time_s=snap.time_s + 60.0)).state
    if not isinstance(policy, PolicyBase):
        return
    kept = policy.state_to_json(state)
    if kept is None:
        return
    assert policy.state_from_json(json.loads(json.dumps(kept, allow_nan=False))) == state


def test_gavel_with_no_work_left_terminates() -> None:
    snap = random_snapshot(np.random.default_rng(0), PAPER_12, 1)
    snap = dataclasses.replace(
        snap, age_s=frozen_array([0.0], np.float64), remaining_work=frozen_array([0.0], np.float64)
    )

    def stop(*_: Any) -> None:
        raise TimeoutError("GavelPolicy.decide still running after 1 s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(1)
    try:
        POLICIES["gavel"].decide(snap)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


params_strategy = st.builds(
    UtilityParams,
    p=st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 8.0)),
    alpha=st.one_of(st.sampled_from([0.0, 0.01]), st.floats(0.0, 10.0)),
    k_max=st.one_of(st.sampled_from([1.0, 100.0]), st.floats(1.0, 1e6)),
    mu_na=st.floats(-10.0, 10.0),
    age_key=st.booleans(),
    restart_factor=st.sampled_from(list(RestartFactor)),
    restart_penalty_s=st.one_of(st.none(), st.sampled_from([0.0, 1e-9, 1e9])),
)


@given(snapshots(), params_strategy)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_utility_matrix_finite_and_nonnegative(snap: RoundSnapshot, params: UtilityParams) -> None:
    zero = dataclasses.replace(  # 0/0: no progress, no restore time, no penalty, no age
        snap,
        t_progress_s=frozen_array(np.zeros(snap.num_jobs), np.float64),
        t_ckpt_s=frozen_array(np.zeros(snap.num_jobs), np.float64),
        age_s=frozen_array(np.zeros(snap.num_jobs), np.float64),
        restart_penalty_s=frozen_array(np.zeros(snap.num_jobs), np.float64),
    )
    for s in (snap, zero):
        with np.errstate(over="raise"):  # no overflow on the way either (underflow to 0 is harmless)
            u = utility_matrix(s, params)
        assert u.shape == (s.num_jobs, s.num_configs)
        assert np.all(np.isfinite(u)) and np.all(u >= 0)
        assert np.all(u[~s.valid] == 0)


# ---------------------------------------------------------------- 2. the starvation guard


def guard_threshold(g: float, r: float, params: UtilityParams) -> float:
    """T* = ln(μ_na / (G·r)^p) / α: U = (G·r)^p·K exceeds μ_na exactly when T_queue > T* (and K < K_max)."""
    return math.log(params.mu_na / (g * r) ** params.p) / params.alpha


def lone_job(cluster: Cluster, g_row: np.ndarray, valid: np.ndarray, tp: float, tc: float, pen: float) -> Any:
    """A one-job snapshot on an idle cluster (built on test_hybrid's builder), waiting, with the given history."""
    snap = random_snapshot(np.random.default_rng(0), cluster, 1)

    def one(v: float) -> Any:
        return frozen_array([v], np.float64)

    return lambda tq: dataclasses.replace(
        snap,
        goodput=frozen_array(g_row[None, :], np.float64),
        valid=frozen_array(valid[None, :], bool),
        t_progress_s=one(tp),
        t_ckpt_s=one(tc),
        t_queue_s=one(tq),
        age_s=one(tp + tc + tq),
        restart_penalty_s=one(pen),
        current=frozen_array([-1], np.int64),
        restoring=frozen_array([False], bool),
    )


@st.composite
def guard_cases(draw: st.DrawFn) -> tuple[Any, float, float, UtilityParams]:
    """(snapshot at T_queue, G_max, r, params) for one waiting job with random goodput and restart history."""
    cluster = draw(st.sampled_from([PAPER_12, MIXED_12]))
    c = len(random_snapshot(np.random.default_rng(0), cluster, 1).configs)
    valid = np.array(draw(st.lists(st.booleans(), min_size=c, max_size=c)))
    assume(valid.any())
    g = np.array(draw(st.lists(st.one_of(st.just(1.0), st.floats(1.0, 20.0)), min_size=c, max_size=c)))
    g[np.flatnonzero(valid)[0]] = 1.0  # Sia normalisation: the row minimum over valid configurations is 1
    g = np.where(valid, g, 0.0)
    pen = draw(st.sampled_from([0.0, 30.0, 250.0]))
    tp = draw(st.one_of(st.just(0.0), st.floats(0.0, 1e6)))
    tc = draw(st.one_of(st.just(0.0), st.floats(0.0, 1e7)))
    params = UtilityParams(
        p=draw(st.sampled_from([0.5, 0.25, 1.0])),
        alpha=draw(st.sampled_from([0.01, 0.002])),
        k_max=draw(st.sampled_from([100.0, 10.0])),
        mu_na=draw(st.sampled_from([1.1, 3.0])),
    )
    r = float(restart_factor_decomposed(tp, tc, pen))
    return lone_job(cluster, g, valid, tp, tc, pen), float(g.max()), r, params


@given(guard_cases(), st.one_of(st.just(0.0), st.floats(0.0, 600.0)), st.sampled_from([60.0, 10.0, 300.0]))
@settings(max_examples=150, deadline=None)
def test_guard_admits_at_the_bound_round_and_not_before(
    case: tuple[Any, float, float, UtilityParams], q0: float, round_s: float
) -> None:
    """A job waiting alone from T_queue = q0, rounds every round_s: OAK admits it exactly at the first round whose
    T_queue exceeds T* (G = its best valid goodput), i.e. after ⌈(T* − q0)/round_s⌉ rounds (round 0 = now)."""
    at, g, r, params = case
    oak = OakPolicy(params=params)
    if (g * r) ** params.p * params.k_max <= params.mu_na:  # the limitation: the guard cannot admit it
        assert oak.decide(at(1e12)).config[0] == -1
        return
    t_star = guard_threshold(g, r, params)
    k_star = max(0, math.floor((t_star - q0) / round_s) + 1)  # first k with q0 + k·round_s > T*
    for k in (k_star - 1, k_star) if k_star > 0 else (0,):
        assume(abs(q0 + k * round_s - t_star) > 1e-6 * max(1.0, abs(t_star)))  # ties (U = μ_na) go either way
    assert oak.decide(at(q0 + k_star * round_s)).config[0] >= 0, f"not admitted at round {k_star} (T*={t_star})"
    if k_star > 0:
        assert oak.decide(at(q0 + (k_star - 1) * round_s)).config[0] == -1, "admitted before the bound"


def test_guard_limitation_with_default_parameters() -> None:
    """Defaults p = 0.5, K_max = 100, μ_na = 1.1: the guard fails once r ≤ (μ_na/K_max)²/G = 1.21e-4/G, i.e. once
    T_ckpt ≥ (1/r − 1)·T_progress − P; just above that r, it still admits the job."""
    params = UtilityParams()
    r_star = (params.mu_na / params.k_max) ** (1 / params.p)
    assert r_star == pytest.approx(1.21e-4)
    valid = np.zeros(len(random_snapshot(np.random.default_rng(0), PAPER_12, 1).configs), bool)
    valid[0] = True  # one 1-GPU configuration, G = 1
    g = valid.astype(np.float64)
    tp, pen = 3600.0, 30.0
    oak = OakPolicy(params=params)
    for factor, admitted in ((0.999, False), (1.001, True)):
        tc = tp * (1 / (r_star * factor) - 1) - pen  # r = r_star · factor
        at = lone_job(PAPER_12, g, valid, tp, tc, pen)
        assert bool(oak.decide(at(1e12)).config[0] >= 0) == admitted
    assert tp * (1 / r_star - 1) - pen == pytest.approx(2.975e7, rel=1e-3)  # ≈ 344 days of restoring


class GuardObserver:
    """Per-round check of the guard inside a simulation: whenever OAK leaves a job waiting although one of its
    valid configurations fits the GPUs left idle, T_queue ≤ T* (G = 1 bound), and the streak of such rounds
    lasts at most T* − T_queue(start) seconds, so at most ⌈(T* − T_queue(start))/round_s⌉ + 1 grid rounds."""

    def __init__(self, params: UtilityParams, round_s: float) -> None:
        self.params, self.round_s = params, round_s
        self.streaks: dict[str, tuple[float, float]] = {}
        self.waits = 0  # rounds with a job waiting beside idle GPUs that fit it
        self.longest_s = 0.0
        self.unguarded = 0

    def __call__(self, snap: RoundSnapshot, alloc: Allocation, _placed: Any) -> None:
        p = self.params
        r = restart_factor_decomposed(snap.t_progress_s, snap.t_ckpt_s, snap.restart_penalty_s)
        idle = snap.capacity - alloc.gpus_per_type(snap)
        fits = snap.valid & (snap.config_gpus <= idle[snap.config_type])[None, :]
        u = utility_matrix(snap, p)
        for i, name in enumerate(snap.job_names):
            if alloc.config[i] >= 0 or not fits[i].any():
                self.streaks.pop(name, None)
                continue
            self.waits += 1
            assert u[i, fits[i]].max() <= p.mu_na * (1 + 1e-9), f"{name} left out beside idle GPUs at {snap.time_s}"
            if r[i] ** p.p * p.k_max <= p.mu_na:
                self.unguarded += 1
                continue
            t_star = guard_threshold(1.0, float(r[i]), p)
            assert snap.t_queue_s[i] <= t_star * (1 + 1e-9) + 1e-9, f"{name}: T_queue beyond T* at {snap.time_s}"
            t0, q0 = self.streaks.setdefault(name, (snap.time_s, float(snap.t_queue_s[i])))
            waited = snap.time_s - t0
            self.longest_s = max(self.longest_s, waited)
            assert waited <= max(0.0, t_star - q0) + 1e-6
            grid_rounds = math.floor(snap.time_s / self.round_s) - math.floor(t0 / self.round_s) + 1
            assert grid_rounds <= math.ceil(max(0.0, t_star - q0) / self.round_s) + 1


@pytest.mark.parametrize(
    ("overrides", "restore_cost", "lam", "seed"),
    [
        ({}, "per-app", 0.6, 0),
        ({}, "300", 0.3, 1),
        ({}, "300", 0.6, 0),
        ({"mu_na": 3.0, "alpha": 0.002}, "per-app", 0.6, 1),
    ],
)
def test_guard_bound_holds_under_adversarial_failures(
    overrides: dict[str, float], restore_cost: str, lam: float, seed: int
) -> None:
    """The small workload on paper-12 with frequent failures (λ per job per round), restores that may cost far more
    than the job's P_restart, and the since-last-run queue clock (a preempted job's age key starts again at 1)."""
    physics = PhysicsOptions(restore_cost=restore_cost, queue_clock="since-last-run", horizon_s=3e4)
    policy = make_policy("oak-paper", **overrides)
    assert isinstance(policy, OakPolicy)
    observer = GuardObserver(policy.params, physics.round_s)
    Simulator(load_workload("small"), physics=physics).run(policy, lam, seed, on_round=observer)
    assert observer.waits > 0 and observer.longest_s > 0, "the scenario never made a job wait beside idle GPUs"
    assert observer.unguarded == 0
