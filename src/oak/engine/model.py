"""The cluster model: configurations, shapes and goodput tables of a workload on a cluster; snapshot
building; validation and placement of a policy's allocation. Backend-neutral: the simulator and every runtime
backend use the same object (no I/O, no clock, no processes)."""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Any

import numpy as np

from oak.catalog import AppProfile, Catalog
from oak.catalog.checkpoint import checkpoint_write_s
from oak.engine.ledger import JobsState
from oak.engine.rules import PhysicsOptions
from oak.engine.tables import JobTables
from oak.errors import OakInputError, PolicyError
from oak.failures import rng
from oak.goodput.table import GoodputTable
from oak.model.cluster import Cluster, cluster_preset
from oak.model.config import Configuration, sia_configurations
from oak.model.job import JobSpec
from oak.model.snapshot import (
    Allocation,
    BoolArray,
    RoundSnapshot,
    frozen_array,
    kept_current,
    kept_while_restoring,
    sealed,
)
from oak.placement import place, place_replicas
from oak.placement.placer import GpuSet
from oak.workloads import Workload

#: Limits on shapes outside Sia's configuration set (Pollux's repair: ≤ 16 nodes; Pollux/Sia: ≤ 64 replicas).
MAX_NODES_PER_JOB = 16
MAX_REPLICAS_PER_JOB = 64


class ClusterModel:
    """A workload on a cluster with the application catalog and the world's rules (``PhysicsOptions``):
    everything a round needs that does not change while jobs run."""

    def __init__(
        self,
        workload: Workload,
        cluster: Cluster | None = None,
        catalog: Catalog | None = None,
        physics: PhysicsOptions | None = None,
    ) -> None:
        self.workload = workload
        self.cluster = cluster if cluster is not None else cluster_preset("paper-12")
        self.catalog = catalog if catalog is not None else Catalog.load()
        self.physics = physics if physics is not None else PhysicsOptions()
        #: goodput learned online (oak.engine.beliefs): the ledger carries the beliefs, the model the cap
        self.learned = self.physics.goodput == "learned"
        #: per job, whether its goodput is learned online with the exploration cap while others' are not (a
        #: replayed run's command jobs: oak.engine.beliefs.RunBeliefs); None: as ``learned`` says for all
        self.explore: np.ndarray | None = None
        # Sia's tables stop at 64 GPUs (reference §3.4) and jobs at 64 replicas (§3.5): larger clusters add
        # no larger configurations, only more of them.
        self.configs: tuple[Configuration, ...] = tuple(
            c for c in sia_configurations(self.cluster) if c.gpus <= MAX_REPLICAS_PER_JOB
        )
        types = self.cluster.gpu_types
        self.config_type = np.array([types.index(c.gpu_type) for c in self.configs], dtype=np.int64)
        self.config_gpus = np.array([c.gpus for c in self.configs], dtype=np.int64)
        self.config_nodes = np.array([c.nodes for c in self.configs], dtype=np.int64)
        self.capacity = np.array([self.cluster.capacity(t) for t in types], dtype=np.int64)
        self.node_type = np.array([types.index(n.gpu_type) for n in self.cluster.nodes], dtype=np.int64)
        self.node_gpus = np.array([n.gpus for n in self.cluster.nodes], dtype=np.int64)
        self.gpu_node = np.array(self.cluster.gpu_nodes, dtype=np.int64)
        self._build_shapes()
        self.table = GoodputTable(
            self.catalog, self.shape_nodes, self.shape_replicas, [types[t] for t in self.shape_type]
        )
        jobs = workload.jobs
        self.n = len(jobs)
        if self.n == 0:
            raise OakInputError(f"workload {workload.name!r}: no jobs")
        horizon, jitter = self.physics.horizon_s, self.physics.arrival_jitter_s
        late = [j for j in jobs if j.submit_time_s >= horizon]
        if late:
            raise OakInputError(
                f"workload {workload.name!r}, job {late[0].name!r}: submitted at {late[0].submit_time_s:g} s, not "
                f"before the horizon of {horizon:g} s (--horizon); {len(late)} job(s) would never arrive"
            )
        last = max(jobs, key=lambda j: j.submit_time_s)
        if jitter > 0 and last.submit_time_s + jitter > horizon:
            # the jitter delays a submission by a seeded uniform in [0, J): refused whatever the seed, so that every
            # seed runs the same jobs (a job arriving past the end would count a censored JCT of 0)
            raise OakInputError(
                f"--arrival-jitter {jitter:g}: can delay job {last.name!r} of workload {workload.name!r} (submitted "
                f"at {last.submit_time_s:g} s) up to {last.submit_time_s + jitter:g} s, past the horizon of "
                f"{horizon:g} s (--horizon), where it would never arrive; expected a jitter of at most "
                f"{horizon - last.submit_time_s:g} s (the gap from the last submission to the horizon), or a longer "
                "--horizon"
            )
        self.apps = [self.catalog.app(j.application) for j in jobs]
        self.tables = JobTables(self.table, self.apps)
        self.tables.use_columns(self.config_shape)
        self.names = np.array([j.name for j in jobs], dtype=object)
        self.app_names = np.array([j.application for j in jobs], dtype=object)
        self.keys = np.array([rng.job_key(j.name) for j in jobs], dtype=np.uint64)
        self.penalty = np.array(
            [
                j.restart_penalty_s if j.restart_penalty_s is not None else a.restart_penalty_s
                for j, a in zip(jobs, self.apps, strict=True)
            ],
            dtype=np.float64,
        )
        self.restore_delay = np.array([self.physics.restore_delay_s(p) for p in self.penalty])
        self.total = np.array([a.total_progress for a in self.apps], dtype=np.float64)
        self.calibration = np.array([a.calibration for a in self.apps], dtype=np.float64)
        #: seconds one periodic checkpoint of each job takes (its application's, oak.catalog.checkpoint)
        self.ckpt_write = np.array([checkpoint_write_s(a.name) for a in self.apps], dtype=np.float64)
        gpus = self.config_gpus[None, :]
        lo = np.array([j.min_gpus for j in jobs])[:, None]
        hi = np.array([self._bound(j, a) for j, a in zip(jobs, self.apps, strict=True)])[:, None]
        per_app = {
            a: [self.table.has_profile(a, c.gpu_type) for c in self.configs] for a in {j.application for j in jobs}
        }
        profiled = np.array([per_app[j.application] for j in jobs], dtype=bool).reshape(len(jobs), len(self.configs))
        self.bounds = (gpus >= lo) & (gpus <= hi) & profiled
        self.min_gpus = np.array([j.min_gpus for j in jobs], dtype=np.int64)
        self.max_gpus = hi[:, 0].astype(np.int64)
        self.requested = np.array([j.requested_gpus for j in jobs], dtype=np.int64)
        for i, j in enumerate(jobs):
            ok = self.bounds[i] & (self.table.choices(j.application, 0).goodput[self.config_shape] > 0)
            if not ok.any():
                sizes = sorted({c.gpus for c in self.configs})
                raise OakInputError(
                    f"workload {workload.name!r}, job {j.name!r}: GPU bounds [{j.min_gpus}, {j.max_gpus}] admit no "
                    f"feasible configuration of cluster {self.cluster.name!r} (GPU counts {sizes}, "
                    f"application {j.application!r} profiled on {sorted(a for a in self.apps[i].gpus)})"
                )

    def _bound(self, job: JobSpec, app: AppProfile) -> int:
        """A job's largest GPU count: its ``max_gpus``, but for a Sia trace's job under ``replicas_cap = False``
        (the artifact's reading of ``num_replicas``): 64 GPUs and its application's largest batch over its
        smallest per-GPU batch."""
        if self.physics.replicas_cap or not job.replicas_from_trace:
            return int(job.max_gpus)
        smallest = min((g.b_min for g in app.gpus.values()), default=1)
        return int(max(job.min_gpus, min(MAX_REPLICAS_PER_JOB, app.m_max // max(smallest, 1))))

    def _build_shapes(self) -> None:
        """Every (GPU type, nodes N, GPUs R) a job may run on: Sia's configurations plus, for policies that place
        replicas themselves, any N ≤ 16 nodes of one type holding R ≤ 64 GPUs (reference §3.5, §4.4)."""
        shapes: dict[tuple[int, int, int], int] = {}
        for ti, t in enumerate(self.cluster.gpu_types):
            nodes = self.cluster.nodes_of(t)
            per_node = min(n.gpus for n in nodes)
            for n in range(1, min(len(nodes), MAX_NODES_PER_JOB) + 1):
                for r in range(n, min(n * per_node, MAX_REPLICAS_PER_JOB) + 1):
                    shapes.setdefault((ti, n, r), len(shapes))
        for c, t in zip(self.configs, self.config_type, strict=True):
            shapes.setdefault((int(t), c.nodes, c.gpus), len(shapes))
        self.shape_index = shapes
        arr = np.array(list(shapes), dtype=np.int64)
        self.shape_type, self.shape_nodes, self.shape_replicas = arr[:, 0], arr[:, 1], arr[:, 2]
        self.config_shape = np.array(
            [shapes[(int(t), c.nodes, c.gpus)] for c, t in zip(self.configs, self.config_type, strict=True)],
            dtype=np.int64,
        )
        self.shape_config = np.full(len(shapes), -1, dtype=np.int64)
        self.shape_config[self.config_shape] = np.arange(len(self.configs))
        #: the last GPU sets flattened (``_flat_holding``): the sets themselves, each GPU's set and the GPU ids
        self._flat: tuple[list[GpuSet], np.ndarray, np.ndarray] | None = None

    def _flat_holding(self, holding: list[GpuSet]) -> tuple[np.ndarray, np.ndarray]:
        """The GPU ids of these sets concatenated in order, and the position of the set each belongs to. The last
        answer is reused while the list holds the very same set objects (tuples: the same objects, the same ids):
        a round's snapshot and its placement read the same sets, and a round that moved no job reads the last
        round's."""
        last = self._flat
        if last is not None and len(last[0]) == len(holding) and all(map(operator.is_, last[0], holding)):
            return last[1], last[2]
        counts = np.fromiter(map(len, holding), dtype=np.int64, count=len(holding))
        owners = np.repeat(np.arange(len(holding)), counts)
        ids = np.fromiter(itertools.chain.from_iterable(holding), dtype=np.int64, count=int(counts.sum()))
        self._flat = (list(holding), owners, ids)
        return owners, ids

    def progress_rates(self, st: JobsState, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Jobs ``idx``'s epochs at their progress and their progress rates on the shapes they hold (calibrated)."""
        e = self.tables.epochs(idx, st.progress[idx])
        rows = self.tables.rows(idx, e)
        return e, np.asarray(self.tables.rate_at(rows, st.shape[idx]) / self.calibration[idx])

    @staticmethod
    def _work_known(st: JobsState, active: np.ndarray) -> BoolArray | None:
        """The world's word (a runtime's ``JobsState.work_known``), else the beliefs' (``oak replay``), else None."""
        known = st.work_known[active] if st.work_known is not None else None
        if known is None and st.beliefs is not None:
            known = st.beliefs.work_known(active)
        out: BoolArray | None = None if known is None else frozen_array(known, bool)
        return out

    def snapshot(self, st: JobsState, t: float, active: np.ndarray, needs_node_goodput: bool = False) -> RoundSnapshot:
        """The policy's view of the active jobs at time t."""
        e = self.tables.epochs(active, st.progress[active])
        st.epoch[active] = e
        full = st.beliefs is not None or needs_node_goodput
        rows = self.tables.rows(active, e, full=full)
        if full:  # every shape: (J, S) raw goodput and progress rate
            shape_goodput = self.tables.goodput[rows]
            shape_rate = self.tables.rate[rows]
        if st.beliefs is not None:  # what the scheduler believes, where the job can run at all
            believed_goodput, believed_rate = st.beliefs.rows(active, e, st.progress[active] / self.total[active])
            feasible = shape_goodput > 0
            shape_goodput = np.where(feasible, believed_goodput, 0.0)
            shape_rate = np.where(feasible, believed_rate, 0.0)
        # (J, C) on the configurations' shapes only
        raw = shape_goodput[:, self.config_shape] if full else self.tables.goodput_cols[rows]
        valid = self.bounds[active] & (raw > 0)
        max_gpus = self.max_gpus[active]
        if self.physics.bootstrap or self.physics.exploration_cap or self.learned or self.physics.first_type_tie:
            valid, max_gpus = self._explorable(valid, st.max_run_gpus[active], max_gpus)
        elif self.explore is not None and self.explore[active].any():
            capped, capped_max = self._explorable(valid, st.max_run_gpus[active], max_gpus, learned=True)
            some = self.explore[active]
            valid = np.where(some[:, None], capped, valid)
            max_gpus = np.where(some, capped_max, max_gpus)
        row_min = np.where(valid, raw, np.inf).min(axis=1)
        good = np.where(valid, raw / np.where(np.isfinite(row_min), row_min, 1.0)[:, None], 0.0)
        never = st.max_run_gpus[active] == 0 if self.physics.first_type_tie else None
        if never is not None and never.any():  # the artifact's tie: nothing is known of a job that has not run
            good = np.where(never[:, None] & valid, 1.0, good)
        rate = (shape_rate[:, self.config_shape] if full else self.tables.rate_cols[rows]) / self.calibration[
            active, None
        ]
        node_goodput = None
        if needs_node_goodput:
            node_goodput = np.zeros(
                (len(active), len(self.capacity), int(self.shape_nodes.max()) + 1, int(self.shape_replicas.max()) + 1)
            )
            node_goodput[:, self.shape_type, self.shape_nodes, self.shape_replicas] = shape_goodput
        shape = (len(active), len(self.cluster.nodes))
        owners, gpu_ids = self._flat_holding([st.gpus[i] for i in active.tolist()])
        if len(gpu_ids):  # one count over all jobs' GPUs: GPUs held per (job, node)
            cells = np.bincount(owners * shape[1] + self.gpu_node[gpu_ids], minlength=shape[0] * shape[1])
            held = cells.astype(np.int64, copy=False).reshape(shape)
        else:
            held = np.zeros(shape, dtype=np.int64)
        capacity, node_gpus = self.capacity, self.node_gpus
        if st.node_down.any():  # nodes under repair hold no GPUs this round
            node_gpus = frozen_array(np.where(st.node_down, 0, self.node_gpus), np.int64)
            capacity = frozen_array(
                np.bincount(self.node_type, weights=node_gpus, minlength=len(self.capacity)), np.int64
            )
        snap = RoundSnapshot(
            time_s=t,
            configs=self.configs,
            gpu_types=self.cluster.gpu_types,
            config_type=self.config_type,
            config_gpus=self.config_gpus,
            capacity=capacity,
            job_names=tuple(self.names[active].tolist()),
            applications=tuple(self.app_names[active].tolist()),
            goodput=sealed(good, np.float64),
            valid=sealed(valid, bool),
            t_progress_s=sealed(st.t_progress[active], np.float64),
            t_ckpt_s=sealed(st.t_ckpt[active], np.float64),
            t_queue_s=sealed(st.t_queue[active], np.float64),
            age_s=sealed(t - st.submit[active], np.float64),
            restarts=sealed(st.restarts[active], np.int64),
            failures=sealed(st.failures[active], np.int64),
            current=sealed(st.config[active], np.int64),
            restoring=sealed((st.shape[active] >= 0) & (st.restore_left[active] > 0), bool),
            restart_penalty_s=sealed(self.penalty[active], np.float64),
            attained_gpu_s=sealed(st.gpu_s[active], np.float64),
            min_gpus=sealed(self.min_gpus[active], np.int64),
            max_gpus=sealed(max_gpus, np.int64),
            requested_gpus=sealed(self.requested[active], np.int64),
            progress_rate=sealed(np.where(valid, rate, 0.0), np.float64),
            remaining_work=sealed(self.total[active] - st.progress[active], np.float64),
            total_work=sealed(self.total[active], np.float64),
            node_type=self.node_type,
            node_gpus=node_gpus,
            current_replicas=sealed(held, np.int64),
            node_goodput=None if node_goodput is None else sealed(node_goodput, np.float64),
            policy_state=st.policy_state,
            solver_prices=st.solver_prices,
            work_known=self._work_known(st, active),
            failure_restarts=self.physics.failure_restarts,
            failure_overhead=None
            if st.failure_overhead is None
            else sealed(np.where(valid, st.failure_overhead[active], 0.0), np.float64),
        )
        if never is not None and never.any():
            snap = dataclasses.replace(snap, tie_config=self._tie_configs(snap, never))
        kept = None if self.physics.restores_preemptible else kept_while_restoring(snap)
        if st.pinned.shape == st.done.shape and st.pinned[active].any():  # held by the world: a stop in flight
            pinned = kept_current(snap, st.pinned[active])
            kept = pinned if kept is None else np.where(pinned >= 0, pinned, kept)
        return snap if kept is None else dataclasses.replace(snap, kept=kept)

    def _explorable(
        self, valid: np.ndarray, ran: np.ndarray, max_gpus: np.ndarray, *, learned: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """What the artifact's rules let a job be offered: only its smallest configurations before it has run
        (bootstrap), at most 2× the most GPUs it has run on after (exploration cap); (valid, max GPUs). Learned
        goodput implies both, as ``oak serve``'s exploration limit does."""
        gpus = self.config_gpus[None, :]
        fewest = np.where(valid, gpus, np.iinfo(np.int64).max).min(axis=1)
        limit = np.full(len(ran), np.iinfo(np.int64).max)
        learned = learned or self.learned
        if self.physics.bootstrap or learned or self.physics.first_type_tie:
            limit = np.where(ran == 0, fewest, limit)
        if self.physics.exploration_cap or learned:
            limit = np.where(ran > 0, np.maximum(2 * ran, fewest), limit)
        return valid & (gpus <= limit[:, None]), np.minimum(max_gpus, limit)

    def _tie_configs(self, snap: RoundSnapshot, never: np.ndarray) -> np.ndarray:
        """(J,) under ``first_type_tie``: for each job that has never run, its offered configuration of the GPU
        type with the most GPUs not held at the round's start (the cluster's type order among equals); −1 for
        the others. Its options are equal in value, so this is the one the round programs keep on a tie."""
        held = np.bincount(snap.node_type, weights=snap.current_replicas.sum(axis=0), minlength=len(snap.capacity))
        free = snap.capacity - held.astype(np.int64)
        rank = np.empty(len(free), dtype=np.int64)
        rank[np.lexsort((np.arange(len(free)), -free))] = np.arange(len(free))  # 0: the emptiest type
        key = np.where(snap.valid, rank[snap.config_type][None, :], np.iinfo(np.int64).max)
        best = np.argmin(key, axis=1)
        return np.where(never & snap.valid.any(axis=1), best, -1).astype(np.int64)

    def _per_node(self, gpus: GpuSet) -> tuple[int, tuple[int, ...]]:
        """A placement's per-node shape: its GPU type and its sorted GPU counts per node."""
        nodes = self.gpu_node[list(gpus)]
        counts = np.bincount(nodes)
        return int(self.node_type[nodes[0]]), tuple(sorted(counts[counts > 0].tolist()))

    def plan(
        self,
        snap: RoundSnapshot,
        alloc: Allocation,
        name: str,
        st: JobsState,
        active: np.ndarray,
        avoid_failing: bool = False,
    ) -> tuple[np.ndarray, list[GpuSet]]:
        """Validate policy ``name``'s allocation and place it: each active job's shape index (−1: none) and GPU ids.
        ``avoid_failing``: new placements take the nodes with the fewest observed failures first.

        Raises RuntimeError on an allocation that breaks validity, capacity or the one-type rule."""
        if alloc.replicas is not None:
            return self._apply_replicas(snap, alloc, name, snap.time_s, active, st)
        return self._apply_configs(snap, alloc, name, snap.time_s, active, st, avoid_failing)

    def _apply_configs(
        self,
        snap: RoundSnapshot,
        alloc: Allocation,
        name: str,
        t: float,
        active: np.ndarray,
        st: JobsState,
        avoid_failing: bool = False,
    ) -> tuple[np.ndarray, list[GpuSet]]:
        choice = _integers(alloc.config, name, t, "configurations")
        if choice.shape != (len(active),):
            raise PolicyError(f"policy {name!r} returned {choice.shape} choices for {len(active)} jobs")
        if snap.kept is not None:
            choice = self._hold_kept(snap, choice)
        chosen = np.flatnonzero(choice >= 0)
        picked = choice[chosen]
        bad = (picked >= len(self.configs)) | ~snap.valid[chosen, np.minimum(picked, len(self.configs) - 1)]
        if bad.any():  # one vectorised check per round; the message is built only when it fails
            pos = int(chosen[np.flatnonzero(bad)[0]])
            c = int(choice[pos])
            what = f"configuration {c} ({self.configs[c]})" if c < len(self.configs) else f"configuration {c}"
            raise PolicyError(
                f"policy {name!r} at t = {t:,.0f} s: job {snap.job_names[pos]!r} was given {what}, which is not "
                f"valid for it (outside its GPU bounds or where it cannot run; {int(snap.valid[pos].sum())} "
                f"of {len(self.configs)} configurations are)"
            )
        used = np.zeros(len(self.capacity), dtype=np.int64)
        np.add.at(used, self.config_type[picked], self.config_gpus[picked])
        if np.any(used > snap.capacity):
            k = int(np.flatnonzero(used > snap.capacity)[0])
            raise PolicyError(
                f"policy {name!r} at t = {t:,.0f} s: {int(used[k])} GPUs of type {snap.gpu_types[k]!r} allocated, "
                f"{int(snap.capacity[k])} available"
            )
        configs = self.configs
        new_cfgs = [configs[c] if c >= 0 else None for c in choice.tolist()]
        old_cfgs = [configs[c] if c >= 0 else None for c in st.config[active].tolist()]
        down = frozenset(np.flatnonzero(st.node_down).tolist())
        health = st.node_failures.tolist() if avoid_failing and st.node_failures.any() else None
        risk = None
        if health is not None and st.work_at_risk.shape == st.done.shape:  # the most at risk on the healthiest
            gpus = np.where(choice >= 0, self.config_gpus[np.maximum(choice, 0)], 0)
            risk = (st.work_at_risk[active] * gpus).tolist()
        previous = [st.gpus[i] for i in active.tolist()]
        placed = place(
            self.cluster, new_cfgs, previous, old_cfgs, down, health, risk, flat=self._flat_holding(previous)
        )
        shapes = np.where(choice >= 0, self.config_shape[np.maximum(choice, 0)], -1)
        return shapes, placed

    def _hold_kept(self, snap: RoundSnapshot, choice: np.ndarray) -> np.ndarray:
        """The policy's choice with the world's kept configurations imposed; where that exceeds a capacity, the
        other jobs whose configuration changed lose theirs, last job first, until it fits (a policy that honours
        ``snap.kept`` is returned unchanged)."""
        assert snap.kept is not None
        out = np.where(snap.kept >= 0, snap.kept, choice)
        if np.array_equal(out, choice):
            return choice
        for pos in reversed(np.flatnonzero((out >= 0) & (snap.kept < 0) & (out != snap.current)).tolist()):
            used = np.zeros(len(self.capacity), dtype=np.int64)
            on = out >= 0
            np.add.at(used, self.config_type[out[on]], self.config_gpus[out[on]])
            if np.all(used <= snap.capacity):
                break
            out[pos] = -1
        return out

    def _apply_replicas(
        self, snap: RoundSnapshot, alloc: Allocation, name: str, t: float, active: np.ndarray, st: JobsState
    ) -> tuple[np.ndarray, list[GpuSet]]:
        rep = _integers(alloc.replicas, name, t, "replicas")
        want = (len(active), len(self.cluster.nodes))
        if rep.shape != want:
            raise PolicyError(
                f"policy {name!r} at t = {t:,.0f} s returned replicas of shape {rep.shape}; expected {want} "
                "(one row per job, one column per node)"
            )
        if np.any(rep < 0):
            pos, node = (int(v[0]) for v in np.nonzero(rep < 0))
            raise PolicyError(
                f"policy {name!r} at t = {t:,.0f} s gave job {snap.job_names[pos]!r} {int(rep[pos, node])} GPUs on node "
                f"{node}; expected a count >= 0"
            )
        over = np.flatnonzero(rep.sum(axis=0) > snap.node_gpus)
        if len(over):
            node = int(over[0])
            raise PolicyError(
                f"policy {name!r} at t = {t:,.0f} s placed {int(rep[:, node].sum())} GPUs on node {node}, which has "
                f"{int(snap.node_gpus[node])} available"
            )
        shapes = np.full(len(active), -1, dtype=np.int64)
        for pos in range(len(active)):
            used = np.flatnonzero(rep[pos])
            if len(used) == 0:
                continue
            types = set(self.node_type[used].tolist())
            key = (int(self.node_type[used[0]]), len(used), int(rep[pos].sum()))
            shape = self.shape_index.get(key, -1)
            i = active[pos]
            feasible = shape >= 0 and self.table.choices(self.apps[i].name, int(st.epoch[i])).goodput[shape] > 0
            if len(types) > 1 or not feasible or not snap.min_gpus[pos] <= key[2] <= snap.max_gpus[pos]:
                raise PolicyError(
                    f"policy {name!r} at t = {t:,.0f} s gave job {snap.job_names[pos]!r} an invalid placement "
                    f"({int(rep[pos].sum())} GPUs on nodes {used.tolist()}): GPUs of one type, a shape it can run "
                    f"on, between its {int(snap.min_gpus[pos])} and {int(snap.max_gpus[pos])} GPUs, were expected"
                )
            shapes[pos] = shape
        placed = place_replicas(self.cluster, rep.tolist(), [st.gpus[i] for i in active])
        return shapes, placed


def _integers(values: Any, name: str, t: float, what: str) -> np.ndarray:
    """A policy's integer array (configurations, replicas) as int64; a PolicyError for values that are not
    whole numbers (NaN, 1.5), which a plain cast would turn into some integer silently."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise PolicyError(
                f"policy {name!r} at t = {t:,.0f} s returned {what} that are not whole numbers (e.g. {float(arr[bad].flat[0])!r})"
            )
    elif arr.dtype.kind not in "iu":
        raise PolicyError(f"policy {name!r} at t = {t:,.0f} s returned {what} of type {arr.dtype}; expected integers")
    return arr.astype(np.int64, copy=False)
