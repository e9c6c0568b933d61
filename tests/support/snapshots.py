"""Shared snapshot helpers: clusters, random round snapshots, feasibility and MILP-optimum checks."""

from __future__ import annotations

from typing import Any

import numpy as np

from oak.model.cluster import Cluster, Node, homogeneous_cluster
from oak.model.config import sia_configurations
from oak.model.snapshot import RoundSnapshot, frozen_array
from oak.scoring import UtilityParams, utility_matrix
from oak.solve import AssignmentProblem, solve_assignment

PAPER_12 = homogeneous_cluster("aws", 3, 4)
MIXED_12 = Cluster((Node(0, "aws", 4), Node(1, "aws", 4), Node(2, "rtx", 4)))


def random_snapshot(
    rng: np.random.Generator,
    cluster: Cluster,
    jobs: int,
    *,
    names: tuple[str, ...] | None = None,
    policy_state: Any = None,
) -> RoundSnapshot:
    """A snapshot with random Sia goodput (row minimum 1), validity and job histories."""
    configs = sia_configurations(cluster)
    types = cluster.gpu_types
    gpus = np.array([c.gpus for c in configs])
    j, c = jobs, len(configs)
    valid = rng.random((j, c)) < 0.8
    valid[np.arange(j), rng.integers(0, c, j)] = True
    raw = gpus[None, :] ** rng.uniform(0.3, 1.0, (j, 1)) * rng.uniform(0.5, 2.0, (j, 1)) * rng.uniform(0.8, 1.2, (j, c))
    good = np.where(valid, raw / np.where(valid, raw, np.inf).min(axis=1, keepdims=True), 0.0)
    age = rng.uniform(0, 3000, j)
    t_queue = rng.uniform(0, 1, j) * age
    t_ckpt = rng.uniform(0, 0.3, j) * (age - t_queue)
    k = len(cluster.nodes)
    return RoundSnapshot(
        time_s=float(rng.uniform(0, 1e5)),
        configs=configs,
        gpu_types=types,
        config_type=frozen_array([types.index(x.gpu_type) for x in configs], np.int64),
        config_gpus=frozen_array(gpus, np.int64),
        capacity=frozen_array([cluster.capacity(t) for t in types], np.int64),
        job_names=names if names is not None else tuple(f"job{i}" for i in range(j)),
        applications=("cifar10",) * j,
        goodput=frozen_array(good, np.float64),
        valid=frozen_array(valid, bool),
        t_progress_s=frozen_array(age - t_queue - t_ckpt, np.float64),
        t_ckpt_s=frozen_array(t_ckpt, np.float64),
        t_queue_s=frozen_array(t_queue, np.float64),
        age_s=frozen_array(age, np.float64),
        restarts=frozen_array(rng.integers(0, 4, j), np.int64),
        failures=frozen_array(rng.integers(0, 4, j), np.int64),
        current=frozen_array(np.where(rng.random(j) < 0.5, rng.integers(0, c, j), -1), np.int64),
        restoring=frozen_array(rng.random(j) < 0.2, bool),
        restart_penalty_s=frozen_array(rng.uniform(20, 250, j), np.float64),
        attained_gpu_s=frozen_array(rng.uniform(0, 1e4, j), np.float64),
        min_gpus=frozen_array(np.ones(j), np.int64),
        max_gpus=frozen_array(np.full(j, 12), np.int64),
        requested_gpus=frozen_array(np.full(j, 4), np.int64),
        progress_rate=frozen_array(good, np.float64),
        remaining_work=frozen_array(np.ones(j), np.float64),
        total_work=frozen_array(np.full(j, 2.0), np.float64),
        node_type=frozen_array([types.index(n.gpu_type) for n in cluster.nodes], np.int64),
        node_gpus=frozen_array([n.gpus for n in cluster.nodes], np.int64),
        current_replicas=frozen_array(np.zeros((j, k)), np.int64),
        policy_state=policy_state,
    )


def milp_optimum(snap: RoundSnapshot, params: UtilityParams) -> float:
    """OAK's exact optimum: μ_na·J + max Σ x·(U − μ_na)."""
    u = utility_matrix(snap, params)
    problem = AssignmentProblem(
        value=u - params.mu_na,
        valid=snap.valid,
        gpus=snap.config_gpus,
        gpu_type=snap.config_type,
        capacity=snap.capacity,
    )
    return params.mu_na * snap.num_jobs + solve_assignment(problem).objective


def check_feasible(snap: RoundSnapshot, x: np.ndarray) -> None:
    assert x.dtype == np.int64
    for ind in np.atleast_2d(x):
        on = ind >= 0
        assert np.all(ind < snap.num_configs)
        assert np.all(snap.valid[np.flatnonzero(on), ind[on]]), "valid configurations only"
        used = np.zeros(len(snap.capacity), dtype=np.int64)
        np.add.at(used, snap.config_type[ind[on]], snap.config_gpus[ind[on]])
        assert np.all(used <= snap.capacity), "GPUs per type within capacity"


def uniform_goodput(cluster: Cluster, jobs: int, value: float = 1.0) -> np.ndarray:
    """Positive goodput on every (type, N ≤ nodes of that type, N ≤ R ≤ GPUs on N nodes)."""
    types = cluster.gpu_types
    k, total = len(cluster.nodes), cluster.total_gpus
    ng = np.zeros((jobs, len(types), k + 1, total + 1))
    for t, name in enumerate(types):
        per = max(n.gpus for n in cluster.nodes_of(name))
        for n in range(1, len(cluster.nodes_of(name)) + 1):
            ng[:, t, n, n : n * per + 1] = value * np.arange(n, n * per + 1) ** 0.8
    return ng
