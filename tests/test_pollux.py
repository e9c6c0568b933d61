"""Pollux (reference §4): repair feasibility, restart factor, fair-share speedup, determinism, simulation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oak.errors import OakInputError
from oak.model.cluster import Cluster, Node, homogeneous_cluster
from oak.model.config import sia_configurations
from oak.model.snapshot import RoundSnapshot, frozen_array
from oak.policies import make_policy
from oak.policies.nsga import GeneticState, job_order
from oak.policies.pollux import (
    MAX_NODES_PER_JOB,
    PolluxPolicy,
    PolluxProblem,
    pollux_restart_factor,
    power_mean,
)
from oak.sim import Simulator
from oak.workloads import load_workload
from support.snapshots import uniform_goodput

#: its module-scoped fixtures are built once, on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_pollux")


def make_snapshot(
    cluster: Cluster,
    node_goodput: np.ndarray,
    *,
    current_replicas: np.ndarray | None = None,
    age_s: Any = None,
    restarts: Any = None,
    attained: Any = None,
    min_gpus: Any = None,
    max_gpus: Any = None,
    time_s: float = 600.0,
    names: tuple[str, ...] | None = None,
    policy_state: Any = None,
) -> RoundSnapshot:
    """A snapshot whose only Pollux-relevant parts are the node fields, the job histories and bounds."""
    j = node_goodput.shape[0]
    configs = sia_configurations(cluster)
    types = cluster.gpu_types
    c = len(configs)
    node_type = np.array([types.index(n.gpu_type) for n in cluster.nodes])
    node_gpus = np.array([n.gpus for n in cluster.nodes])
    ones = np.ones(j)
    return RoundSnapshot(
        time_s=time_s,
        configs=configs,
        gpu_types=types,
        config_type=frozen_array([types.index(x.gpu_type) for x in configs], np.int64),
        config_gpus=frozen_array([x.gpus for x in configs], np.int64),
        capacity=frozen_array([cluster.capacity(t) for t in types], np.int64),
        job_names=names if names is not None else tuple(f"job{i}" for i in range(j)),
        applications=("cifar10",) * j,
        goodput=frozen_array(np.ones((j, c)), np.float64),
        valid=frozen_array(np.ones((j, c)), bool),
        t_progress_s=frozen_array(ones * 100, np.float64),
        t_ckpt_s=frozen_array(ones * 0, np.float64),
        t_queue_s=frozen_array(ones * 0, np.float64),
        age_s=frozen_array(age_s if age_s is not None else ones * 1000.0, np.float64),
        restarts=frozen_array(restarts if restarts is not None else np.zeros(j), np.int64),
        failures=frozen_array(np.zeros(j), np.int64),
        current=frozen_array(np.full(j, -1), np.int64),
        restoring=frozen_array(np.zeros(j), bool),
        restart_penalty_s=frozen_array(ones * 30, np.float64),
        attained_gpu_s=frozen_array(attained if attained is not None else np.arange(j), np.float64),
        min_gpus=frozen_array(min_gpus if min_gpus is not None else np.ones(j), np.int64),
        max_gpus=frozen_array(max_gpus if max_gpus is not None else np.full(j, 64), np.int64),
        requested_gpus=frozen_array(ones, np.int64),
        progress_rate=frozen_array(np.ones((j, c)), np.float64),
        remaining_work=frozen_array(ones, np.float64),
        total_work=frozen_array(ones, np.float64),
        node_type=frozen_array(node_type, np.int64),
        node_gpus=frozen_array(node_gpus, np.int64),
        current_replicas=frozen_array(
            current_replicas if current_replicas is not None else np.zeros((j, len(node_gpus))), np.int64
        ),
        node_goodput=frozen_array(node_goodput, np.float64),
        policy_state=policy_state,
    )


# ---------------------------------------------------------------- (a) repair feasibility


@st.composite
def repair_cases(draw: Any) -> tuple[RoundSnapshot, np.ndarray, int]:
    k = draw(st.one_of(st.integers(1, 6), st.integers(17, 20)))  # > 16 nodes exercises the 16-node cap
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=k, max_size=k))
    kinds = draw(st.lists(st.sampled_from(["aws", "rtx"]), min_size=k, max_size=k))
    cluster = Cluster(tuple(Node(i, kinds[i], sizes[i]) for i in range(k)))
    j = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    types = cluster.gpu_types
    ng = rng.uniform(0.5, 5.0, (j, len(types), k + 1, cluster.total_gpus + 1))
    ng *= rng.random(ng.shape) < 0.8  # some shapes infeasible
    min_gpus = rng.integers(0, 4, j)
    max_gpus = min_gpus + rng.integers(0, 40, j)
    # absurd individuals as well as plausible ones
    big = draw(st.sampled_from([3, 10, 10**9]))
    low = draw(st.sampled_from([-big, 1]))  # dense individuals put every job on every node
    pop = rng.integers(low, big + 1, size=(draw(st.integers(1, 12)), j, k))
    cur = np.minimum(rng.integers(0, 3, (j, k)), np.array(sizes) // max(j, 1))
    snap = make_snapshot(
        cluster,
        ng,
        current_replicas=cur,
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        attained=rng.uniform(0, 10, j),
        age_s=rng.uniform(0, 1000, j),
    )
    return snap, pop, seed


def check_feasible(snap: RoundSnapshot, prob: PolluxProblem, x: np.ndarray) -> None:
    """Every constraint the simulator validates, plus Pollux's interference rule; x in job order."""
    assert x.dtype == np.int64
    assert np.all(x >= 0)
    assert np.all(x.sum(axis=1) <= snap.node_gpus[None, :]), "node capacity"
    ng = np.asarray(snap.node_goodput)[prob.order]
    min_gpus = snap.min_gpus[prob.order]
    max_gpus = snap.max_gpus[prob.order]
    for ind in x:
        n = np.count_nonzero(ind, axis=1)
        r = ind.sum(axis=1)
        for job in range(len(ind)):
            if r[job] == 0:
                continue
            used = np.flatnonzero(ind[job])
            kinds = set(snap.node_type[used].tolist())
            assert len(kinds) == 1, "a single GPU type per job"
            assert n[job] <= MAX_NODES_PER_JOB
            assert min_gpus[job] <= r[job] <= min(max_gpus[job], 64)
            assert ng[job, kinds.pop(), n[job], r[job]] > 0, "feasible goodput"
        distributed = (n > 1)[:, None] & (ind > 0)
        assert np.all(distributed.sum(axis=0) <= 1), "one distributed job per node"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(repair_cases())
def test_repair_always_feasible(case: tuple[RoundSnapshot, np.ndarray, int]) -> None:
    snap, pop, seed = case
    prob = PolluxProblem.from_snapshot(snap, -1.0, 30.0)
    rng = np.random.default_rng(seed)
    x = prob.repair(pop, rng)
    assert x.shape == pop.shape
    check_feasible(snap, prob, x)
    assert np.all(x <= np.maximum(pop, 0)), "repair only removes replicas"
    assert np.array_equal(prob.repair(x, rng), x), "a repaired individual is left alone"
    # mutation and crossover outputs repair to feasible individuals too
    a = prob.mutate(x, rng)
    c1, c2 = prob.crossover(x, a, rng)
    for y in (a, c1, c2):
        check_feasible(snap, prob, prob.repair(y, rng))


def test_one_distributed_job_per_node_follows_pollux_code() -> None:
    """Jobs A (nodes 0, 1), B (node 0), C (nodes 0, 2), D (node 0), in that order: C is the second
    distributed job on node 0, so from C on every job loses node 0; B (before C) keeps it."""
    cluster = homogeneous_cluster("aws", 3, 8)
    snap = make_snapshot(cluster, uniform_goodput(cluster, 4), attained=[0, 1, 2, 3])
    prob = PolluxProblem.from_snapshot(snap, -1.0, 30.0)
    assert prob.order.tolist() == [0, 1, 2, 3]
    x = np.array([[[1, 1, 0], [1, 0, 0], [1, 0, 1], [1, 0, 0]]])
    y = prob.repair(x, np.random.default_rng(0))[0]
    assert y.tolist() == [[1, 1, 0], [1, 0, 0], [0, 0, 1], [0, 0, 0]]


def test_capacity_goes_to_earlier_jobs_and_small_jobs_are_dropped() -> None:
    """Job order = least attained service, then oldest: the later job gets only what is left on the node,
    and is zeroed when that is below its min_gpus."""
    cluster = homogeneous_cluster("aws", 1, 4)
    snap = make_snapshot(
        cluster, uniform_goodput(cluster, 3), attained=[50, 10, 10], age_s=[5, 1, 9], min_gpus=[2, 1, 1]
    )
    prob = PolluxProblem.from_snapshot(snap, -1.0, 30.0)
    assert prob.order.tolist() == [2, 1, 0]  # job 2 (older) before job 1; job 0 has the most service
    x = np.array([[[3], [1], [3]]])  # in job order: job 2 wants 3, job 1 wants 1, job 0 wants 3
    y = prob.repair(x, np.random.default_rng(0))[0]
    assert y[:, 0].tolist() == [3, 1, 0]


def test_at_most_16_nodes_per_job() -> None:
    cluster = homogeneous_cluster("aws", 20, 1)
    snap = make_snapshot(cluster, uniform_goodput(cluster, 1))
    prob = PolluxProblem.from_snapshot(snap, -1.0, 30.0)
    y = prob.repair(np.ones((5, 1, 20), dtype=np.int64), np.random.default_rng(0))
    assert np.all(np.count_nonzero(y, axis=2) == MAX_NODES_PER_JOB)


def test_max_replicas_and_single_type() -> None:
    cluster = Cluster((Node(0, "aws", 4), Node(1, "aws", 4), Node(2, "rtx", 4)))
    ng = uniform_goodput(cluster, 2)
    snap = make_snapshot(cluster, ng, max_gpus=[5, 64])
    prob = PolluxProblem.from_snapshot(snap, -1.0, 30.0)
    rng = np.random.default_rng(1)
    y = prob.repair(np.array([[[4, 4, 0], [0, 0, 0]]] * 20), rng)
    assert np.all(y[:, 0].sum(axis=1) == 5)  # truncated at max_gpus, nodes visited in random order
    assert len({tuple(r) for r in y[:, 0]}) > 1
    # a job spread over two types keeps the type holding most of its GPUs
    y = prob.repair(np.array([[[0, 0, 0], [1, 0, 3]]]), rng)[0]
    assert y[1].tolist() == [0, 0, 3]


# ---------------------------------------------------------------- (b) restart factor, speedup


@pytest.mark.parametrize(
    ("age", "restarts", "delta", "expected"),
    [
        (600.0, 2, 30.0, 540 / 630),
        (10.0, 1, 30.0, 0.0),
        (0.0, 0, 30.0, 0.0),
        (90.0, 0, 30.0, 0.75),
        (50.0, 3, 0.0, 1.0),
    ],
)
def test_restart_factor_formula(age: float, restarts: int, delta: float, expected: float) -> None:
    assert pollux_restart_factor(np.array([age]), np.array([restarts]), delta)[0] == pytest.approx(expected)


def test_restart_factor_applies_only_to_changed_rows() -> None:
    cluster = homogeneous_cluster("aws", 3, 4)
    ages, restarts = np.array([600.0, 2000.0, 120.0]), np.array([2, 5, 0])
    cur = np.array([[2, 0, 0], [0, 4, 0], [0, 0, 0]])  # job 2 is queued
    snap = make_snapshot(cluster, uniform_goodput(cluster, 3), current_replicas=cur, age_s=ages, restarts=restarts)
    delta = 30.0
    prob = PolluxProblem.from_snapshot(snap, -1.0, delta)
    f = np.maximum(ages - restarts * delta, 0) / (ages + delta)
    inv = np.argsort(prob.order)
    same = cur[prob.order][None]
    moved = cur.copy()
    moved[0] = [0, 0, 2]  # same count, other node: a change
    moved[2] = [0, 0, 1]  # starting a queued job: a change
    moved = moved[prob.order][None]
    base_same = prob.job_speedups(same)[0][inv]
    base_moved = prob.job_speedups(moved)[0][inv]
    s_same = prob.scaled_speedups(same)[0][inv]
    s_moved = prob.scaled_speedups(moved)[0][inv]
    assert s_same == pytest.approx(base_same)  # nothing changed: factor 1 everywhere
    assert s_moved[0] == pytest.approx(base_moved[0] * f[0])
    assert s_moved[1] == pytest.approx(base_moved[1])  # unchanged row
    assert s_moved[2] == pytest.approx(base_moved[2] * f[2])
    assert base_moved[0] == pytest.approx(base_same[0])  # the move keeps (N, R)
    expected = -((np.mean((s_moved + 0.001) ** -1.0)) ** -1.0)
    assert prob.evaluate(moved)[0] == pytest.approx(expected)


def test_fair_share_speedup_is_one_node_share() -> None:
    """speedup at the fair share ⌈G/J⌉ GPUs on ⌈R_f/4⌉ nodes, × #nodes/G, is 1/GPUs-per-node."""
    cluster = homogeneous_cluster("aws", 3, 4)
    for jobs, shape in ((3, (1, 4)), (2, (2, 6)), (12, (1, 1))):
        ng = uniform_goodput(cluster, jobs)
        ng[:, 0, 2, :] *= 0.9  # multi-node overhead
        ng[:, 0, 1, 5:] = 100.0  # one node holding > 4 GPUs: Pollux's quirk would take this as the base
        prob = PolluxProblem.from_snapshot(make_snapshot(cluster, ng), -1.0, 30.0)
        assert prob.speedup[:, 0, shape[0], shape[1]] == pytest.approx(np.full(jobs, 0.25))


def test_power_mean() -> None:
    x = np.array([[1.0, 3.0], [0.0, 0.0]])
    assert power_mean(x, 1.0, axis=1) == pytest.approx([2.001, 0.001])
    assert power_mean(x, -1.0, axis=1)[0] == pytest.approx(2 / (1 / 1.001 + 1 / 3.001))
    assert power_mean(x, 0.0, axis=1) == pytest.approx([np.sqrt(3.0), 0.001])


# ---------------------------------------------------------------- (c), (d) simulation and determinism


@pytest.fixture(scope="module")
def small_run() -> tuple[Any, list[RoundSnapshot]]:
    snaps: list[RoundSnapshot] = []

    def collect(snap: RoundSnapshot, alloc: Any, placed: Any) -> None:
        assert alloc.replicas is not None and alloc.method == "nsga2"
        assert np.all(alloc.config == -1)
        assert np.all(alloc.replicas.sum(axis=0) <= snap.node_gpus)
        snaps.append(snap)

    res = Simulator(load_workload("small")).run(PolluxPolicy(population=20, generations=10), 0.1, 0, on_round=collect)
    return res, snaps


@pytest.mark.portable
def test_small_simulation_finishes_and_is_deterministic(small_run: tuple[Any, list[RoundSnapshot]]) -> None:
    res, snaps = small_run
    assert res.finished
    assert all(j.jct_s is not None for j in res.jobs)
    assert max(s.num_jobs for s in snaps) >= 2
    assert all(s.node_goodput is not None for s in snaps)
    again = Simulator(load_workload("small")).run(PolluxPolicy(population=20, generations=10), 0.1, 0)
    a, b = res.to_json(), again.to_json()
    for run in (a, b):
        for key in ("wall_s", "decision_ms_mean", "decision_ms_p95", "decision_ms_max"):
            run.pop(key)
    assert a == b


def test_decide_is_deterministic_and_warm_starts(small_run: tuple[Any, list[RoundSnapshot]]) -> None:
    _, snaps = small_run
    snap = max(snaps, key=lambda s: (s.num_jobs, s.time_s))
    assert isinstance(snap.policy_state, GeneticState)
    pol = PolluxPolicy(population=30, generations=15)
    a, b = pol.decide(snap), pol.decide(snap)
    assert a.replicas is not None and b.replicas is not None
    assert np.array_equal(a.replicas, b.replicas)
    assert a.objective == b.objective
    assert np.array_equal(a.state.population, b.state.population)
    c = PolluxPolicy(population=30, generations=15, seed=1).decide(snap)
    assert not np.array_equal(a.state.population, c.state.population)
    # the returned objective is the power mean of the chosen allocation
    prob = pol.problem(snap)
    best = a.replicas[prob.order][None]
    assert a.objective == pytest.approx(-prob.evaluate(best)[0])
    assert a.objective >= -prob.evaluate(prob.repair(prob.current[None], np.random.default_rng(0)))[0] - 1e-12


def test_state_reindexes_by_job_name() -> None:
    pop = np.arange(2 * 3 * 2).reshape(2, 3, 2)
    state = GeneticState(kind="k", job_names=("a", "b", "c"), population=pop)
    out = state.reindex("k", ("c", "new", "a"), (2,), 0)
    assert out is not None
    assert out[:, 0].tolist() == pop[:, 2].tolist()
    assert out[:, 1].tolist() == [[0, 0], [0, 0]]
    assert out[:, 2].tolist() == pop[:, 0].tolist()
    assert state.reindex("other", ("a",), (2,), 0) is None
    assert state.reindex("k", ("a",), (3,), 0) is None


def test_warm_start_with_arrivals_and_departures() -> None:
    cluster = homogeneous_cluster("aws", 3, 4)
    pol = PolluxPolicy(population=12, generations=4)
    first = pol.decide(make_snapshot(cluster, uniform_goodput(cluster, 3), names=("a", "b", "c")))
    snap = make_snapshot(
        cluster, uniform_goodput(cluster, 3), names=("c", "d", "a"), policy_state=first.state, time_s=660.0
    )
    prob = pol.problem(snap)
    init = pol.initial_population(snap, prob, np.random.default_rng(0))
    names = tuple(snap.job_names[i] for i in prob.order)
    assert init.shape == (12, 3, 3)
    assert np.all(init[:, names.index("d")] == 0)  # the new job starts from zero rows
    prev = first.state.population
    old = first.state.job_names
    assert np.array_equal(init[:, names.index("a")], prev[:, old.index("a")])
    second = pol.decide(snap)
    assert second.replicas is not None
    check_feasible(snap, prob, second.replicas[prob.order][None])


def test_pymoo_engine_runs_the_same_operators() -> None:
    cluster = homogeneous_cluster("aws", 3, 4)
    snap = make_snapshot(cluster, uniform_goodput(cluster, 4), attained=[0, 1, 2, 3])
    a = PolluxPolicy(population=10, generations=4, engine="pymoo").decide(snap)
    b = PolluxPolicy(population=10, generations=4, engine="pymoo").decide(snap)
    assert a.replicas is not None and b.replicas is not None
    assert np.array_equal(a.replicas, b.replicas)
    prob = PolluxPolicy().problem(snap)
    check_feasible(snap, prob, a.replicas[prob.order][None])


# ---------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "kwargs",
    [
        {"population": 1},
        {"population": 2.5},
        {"generations": 0},
        {"p": float("nan")},
        {"restart_delta_s": -1.0},
        {"seed": -3},
        {"engine": "gpu"},
    ],
)
def test_bad_parameters_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(OakInputError):
        PolluxPolicy(**kwargs)


def test_registry_and_job_order() -> None:
    pol = make_policy("pollux", solver="highs", population=8)
    assert isinstance(pol, PolluxPolicy) and pol.population == 8 and pol.name == "pollux"
    assert PolluxPolicy().needs_node_goodput is True
    cluster = homogeneous_cluster("aws", 1, 4)
    snap = make_snapshot(cluster, uniform_goodput(cluster, 4), attained=[5, 0, 0, 5], age_s=[1, 2, 3, 9])
    assert job_order(snap).tolist() == [2, 1, 3, 0]
    assert PolluxPolicy(p=np.float64(-2.0), restart_delta_s=float(np.int64(10))).p == -2.0
    no_table = RoundSnapshot(**{**snap.__dict__, "node_goodput": None})
    with pytest.raises(OakInputError, match="node_goodput"):
        PolluxPolicy(population=4, generations=1).decide(no_table)
