"""Event-driven simulation of a GPU cluster running a workload under one policy.

Rounds fall on a fixed grid (every ``round_s``) and happen immediately when the job set changes (arrival,
completion, failure). Between events every job's state changes linearly, so the simulator jumps from
event to event. Failures are paired across policies: in grid interval k, job j fails at
k·round_s + round_s·v(seed, j, k) if u(seed, j, k) < λ and it holds GPUs at that instant, with u, v
counter-based uniforms (``oak.sim.rng``) that do not depend on the policy.

Idle stretches are fast-forwarded exactly: once a decision leaves every job without GPUs (and none held GPUs
before it), nothing can change until the next arrival, except the clock and the waiting jobs' T_queue. If the
policy declares that it does not read the clock (``reads_clock`` False, ``oak.policies.base``), or no job is
active, each grid round up to the next arrival (or the horizon) would repeat the same decision; the simulator
then only accumulates T_queue over those rounds, in the same per-round steps (bit-identical sums), without
building snapshots or calling the policy. With an ``on_round`` observer no round is skipped.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from oak.catalog import Catalog
from oak.errors import OakInputError
from oak.goodput.table import GoodputTable
from oak.model.cluster import Cluster, cluster_preset
from oak.model.config import Configuration, sia_configurations
from oak.model.snapshot import Allocation, RoundSnapshot, frozen_array, kept_while_restoring
from oak.placement import place, place_replicas
from oak.placement.placer import GpuSet
from oak.policies.base import Policy, reads_clock
from oak.sim import rng
from oak.sim.metrics import JobResult, RunResult
from oak.sim.physics import PhysicsOptions
from oak.sim.tables import JobTables
from oak.workloads import Workload

RoundObserver = Callable[[RoundSnapshot, Allocation, list[GpuSet]], None]

#: Limits on shapes outside Sia's configuration set (Pollux's repair: ≤ 16 nodes; Pollux/Sia: ≤ 64 replicas).
MAX_NODES_PER_JOB = 16
MAX_REPLICAS_PER_JOB = 64

_EPS = 1e-9
#: Grid intervals whose failure uniforms are drawn in one vectorised block.
_RNG_BLOCK = 64


@dataclass
class JobsState:
    """Mutable per-run state of every job in the workload (arrays of length N; seconds, GPUs, progress in
    base-batch iterations). The real runtime fills the same state from measurements to build its snapshots."""

    submit: np.ndarray
    arrived: np.ndarray
    done: np.ndarray
    finish: np.ndarray
    progress: np.ndarray
    epoch: np.ndarray
    config: np.ndarray
    shape: np.ndarray
    restore_left: np.ndarray
    rate: np.ndarray
    t_progress: np.ndarray
    t_ckpt: np.ndarray
    t_queue: np.ndarray
    restarts: np.ndarray
    failures: np.ndarray
    started: np.ndarray
    gpu_s: np.ndarray
    gpu_lost: np.ndarray
    ckpt_tprog: np.ndarray
    gpus: list[GpuSet]
    policy_state: object = None
    #: the most GPUs each job has run on (the exploration cap's reference); 0: never ran
    max_run_gpus: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: failed jobs that keep their GPUs without progress until their allocation changes (failure_mode "ghost")
    ghost: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    @classmethod
    def initial(cls, submit: np.ndarray) -> JobsState:
        """Every job not yet arrived, never run; ``submit``: submission times (s)."""
        n = len(submit)
        z = np.zeros(n)
        return cls(
            submit=np.asarray(submit, dtype=np.float64),
            arrived=np.zeros(n, bool),
            done=np.zeros(n, bool),
            finish=np.full(n, np.nan),
            progress=z.copy(),
            epoch=np.zeros(n, np.int64),
            config=np.full(n, -1, np.int64),
            shape=np.full(n, -1, np.int64),
            restore_left=z.copy(),
            rate=z.copy(),
            t_progress=z.copy(),
            t_ckpt=z.copy(),
            t_queue=z.copy(),
            restarts=np.zeros(n, np.int64),
            failures=np.zeros(n, np.int64),
            started=np.zeros(n, bool),
            gpu_s=z.copy(),
            gpu_lost=z.copy(),
            ckpt_tprog=z.copy(),
            gpus=[() for _ in range(n)],
            max_run_gpus=np.zeros(n, np.int64),
            ghost=np.zeros(n, bool),
        )


class Simulator:
    """A workload on a cluster, with the application catalog and physics options; ``run`` simulates one
    (policy, failure rate, seed) and returns its metrics. Same inputs ⇒ bit-identical results."""

    def __init__(
        self,
        workload: Workload,
        cluster: Cluster | None = None,
        catalog: Catalog | None = None,
        physics: PhysicsOptions | None = None,
        *,
        idle_fast_forward: bool = True,
    ) -> None:
        """``idle_fast_forward``: skip the provably unchanged rounds of idle stretches (module docstring); False
        steps and decides round by round (same results, for tests)."""
        self.workload = workload
        self.idle_fast_forward = idle_fast_forward
        self.cluster = cluster if cluster is not None else cluster_preset("paper-12")
        self.catalog = catalog if catalog is not None else Catalog.load()
        self.physics = physics if physics is not None else PhysicsOptions()
        # Sia's tables stop at 64 GPUs (reference §3.4) and jobs at 64 replicas (§3.5): larger clusters add
        # no larger configurations, only more of them.
        self.configs: tuple[Configuration, ...] = tuple(
            c for c in sia_configurations(self.cluster) if c.gpus <= MAX_REPLICAS_PER_JOB
        )
        types = self.cluster.gpu_types
        self.config_type = np.array([types.index(c.gpu_type) for c in self.configs], dtype=np.int64)
        self.config_gpus = np.array([c.gpus for c in self.configs], dtype=np.int64)
        self.capacity = np.array([self.cluster.capacity(t) for t in types], dtype=np.int64)
        self.node_type = np.array([types.index(n.gpu_type) for n in self.cluster.nodes], dtype=np.int64)
        self.node_gpus = np.array([n.gpus for n in self.cluster.nodes], dtype=np.int64)
        self.gpu_node = np.repeat(np.arange(len(self.cluster.nodes)), self.node_gpus)
        self._build_shapes()
        self.table = GoodputTable(
            self.catalog, self.shape_nodes, self.shape_replicas, [types[t] for t in self.shape_type]
        )
        jobs = workload.jobs
        self.n = len(jobs)
        if self.n == 0:
            raise OakInputError(f"workload {workload.name!r}: no jobs")
        late = [j for j in jobs if j.submit_time_s >= self.physics.horizon_s]
        if late:
            raise OakInputError(
                f"workload {workload.name!r}, job {late[0].name!r}: submitted at {late[0].submit_time_s:g} s, not "
                f"before the horizon of {self.physics.horizon_s:g} s (--horizon); "
                f"{len(late)} job(s) would never arrive"
            )
        self.apps = [self.catalog.app(j.application) for j in jobs]
        self.tables = JobTables(self.table, self.apps)
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
        gpus = self.config_gpus[None, :]
        lo = np.array([j.min_gpus for j in jobs])[:, None]
        hi = np.array([j.max_gpus for j in jobs])[:, None]
        per_app = {
            a: [self.table.has_profile(a, c.gpu_type) for c in self.configs] for a in {j.application for j in jobs}
        }
        profiled = np.array([per_app[j.application] for j in jobs], dtype=bool).reshape(len(jobs), len(self.configs))
        self.bounds = (gpus >= lo) & (gpus <= hi) & profiled
        self.min_gpus = np.array([j.min_gpus for j in jobs], dtype=np.int64)
        self.max_gpus = np.array([j.max_gpus for j in jobs], dtype=np.int64)
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

    # ------------------------------------------------------------------ run
    def run(
        self,
        policy: Policy,
        failure_rate: float = 0.0,
        seed: int = 0,
        on_round: RoundObserver | None = None,
    ) -> RunResult:
        if not (math.isfinite(failure_rate) and 0.0 <= failure_rate <= 1.0):
            raise OakInputError(f"failure rate {failure_rate!r}: expected a probability in [0, 1]")
        wall_start = time.perf_counter()
        ph = self.physics
        n = self.n
        base_submit = np.array([j.submit_time_s for j in self.workload.jobs], dtype=np.float64)
        if ph.arrival_jitter_s > 0:
            base_submit = base_submit + ph.arrival_jitter_s * rng.uniforms(seed, rng.STREAM_ARRIVAL, self.keys, 0)
        st = JobsState.initial(base_submit)
        round_s = ph.round_s
        t = float(st.submit.min())
        interval = -1
        fail_time = np.full(n, np.inf)
        fail_u = np.ones(n)
        block_start = -(2**62)
        u_block = v_block = np.ones((0, n))
        decision_ms: list[float] = []
        skip_idle = self.idle_fast_forward and on_round is None
        clock_free = skip_idle and not reads_clock(policy)
        immediate = not ph.fixed_steps  # re-decide on arrival, completion and failure, not only on the grid
        decide = immediate or abs(t - round(t / round_s) * round_s) <= _EPS * max(1.0, t)
        st.arrived |= st.submit <= t + _EPS
        while True:
            k = math.floor(t / round_s + _EPS)
            if k != interval:
                interval = k
                if not block_start <= k < block_start + _RNG_BLOCK:
                    block_start = k
                    u_block = rng.uniforms_block(seed, rng.STREAM_FAILURE, self.keys, k, _RNG_BLOCK)
                    v_block = rng.uniforms_block(seed, rng.STREAM_FAILURE_OFFSET, self.keys, k, _RNG_BLOCK)
                fail_u = u_block[k - block_start]
                fail_time = (k + v_block[k - block_start]) * round_s
            idle = False
            if decide:
                active = np.flatnonzero(st.arrived & ~st.done)
                if len(active):
                    idle_before = not bool((st.shape >= 0).any())
                    state_before = st.policy_state
                    self._decide(st, t, active, policy, decision_ms, on_round)
                    # The next rounds' snapshots equal this one but for the clock fields: the same decision.
                    idle = (
                        clock_free
                        and idle_before
                        and state_before is None
                        and st.policy_state is None
                        and not bool((st.shape >= 0).any())
                    )
                else:
                    idle = skip_idle  # no active job: no decision, nothing changes but the clock
                decide = False
            if bool(st.done.all()) or t >= ph.horizon_s:
                break
            if idle:
                t = self._fast_forward(st, t)
                continue  # the loop's state at the last skipped round (k and failure uniforms from the top)
            self._update_rates(st)
            # ---- next event
            alloc = st.shape >= 0
            restoring = alloc & (st.restore_left > 0)
            running = alloc & ~restoring
            candidates = [(k + 1) * round_s, ph.horizon_s]
            pending = ~st.arrived
            if pending.any():
                candidates.append(float(st.submit[pending].min()))
            if restoring.any():
                candidates.append(t + float(st.restore_left[restoring].min()))
            finishing = running & (st.rate > 0)
            if finishing.any():
                candidates.append(t + float(((self.total - st.progress)[finishing] / st.rate[finishing]).min()))
            if failure_rate > 0:
                p_fail = self._fail_prob(st, failure_rate)
                cand = alloc & ~st.ghost & (fail_time > t) & (fail_u < p_fail)
                if cand.any():
                    candidates.append(float(fail_time[cand].min()))
            t_next = min(candidates)
            self._advance(st, t_next - t)
            t = t_next
            # ---- events at t
            if finishing.any():
                left = (self.total - st.progress) / np.where(st.rate > 0, st.rate, np.inf)
                fin = finishing & ((left <= _EPS * np.maximum(1.0, t)) | (st.progress >= self.total))
                if fin.any():
                    st.progress[fin] = self.total[fin]
                    st.done |= fin
                    st.finish[fin] = t
                    for i in np.flatnonzero(fin):
                        st.config[i] = -1
                        st.shape[i] = -1
                        st.gpus[i] = ()
                        st.restore_left[i] = 0.0
                        st.ghost[i] = False
                    decide = decide or immediate
            st.restore_left[(st.restore_left > 0) & (st.restore_left <= _EPS * max(1.0, t))] = 0.0
            if failure_rate > 0:
                p_fail = self._fail_prob(st, failure_rate)
                hit = (st.shape >= 0) & ~st.ghost & (np.abs(fail_time - t) <= _EPS * max(1.0, t)) & (fail_u < p_fail)
                if hit.any():
                    self._fail(st, np.flatnonzero(hit))
                    fail_time[hit] = np.inf
                    decide = decide or immediate
            newly = ~st.arrived & (st.submit <= t + _EPS)
            if newly.any():
                st.arrived |= newly
                decide = decide or immediate
            if t >= (k + 1) * round_s - _EPS:
                decide = True
        end = t
        jobs = tuple(
            JobResult(
                name=spec.name,
                application=spec.application,
                submit_s=float(st.submit[i]),
                jct_s=float(st.finish[i] - st.submit[i]) if st.done[i] else None,
                restarts=int(st.restarts[i]),
                failures=int(st.failures[i]),
                t_progress_s=float(st.t_progress[i]),
                t_ckpt_s=float(st.t_ckpt[i]),
                t_queue_s=float(st.t_queue[i]),
                gpu_s_used=float(st.gpu_s[i]),
                gpu_s_lost=float(st.gpu_lost[i]),
            )
            for i, spec in enumerate(self.workload.jobs)
        )
        last = float(np.nanmax(st.finish)) if st.done.all() else end
        return RunResult(
            policy=policy.name,
            workload=self.workload.name,
            failure_rate=failure_rate,
            seed=seed,
            jobs=jobs,
            decision_ms=tuple(decision_ms),
            makespan_s=last - float(st.submit.min()),
            end_time_s=end,
            wall_s=time.perf_counter() - wall_start,
        )

    # ------------------------------------------------------------ helpers
    def _fast_forward(self, st: JobsState, t: float) -> float:
        """Step from ``t`` over the grid rounds whose decision is skipped, with no job holding GPUs: those the
        event loop would reach next (same ``k``, same round times) that fall before the horizon and bring no
        arrival. Only T_queue of the waiting jobs changes, by the loop's per-round ``dt`` (same float sums); the
        loop then resumes at the last skipped round with nothing to decide. Returns the new time."""
        round_s, horizon = self.physics.round_s, self.physics.horizon_s
        pending = ~st.arrived
        next_arrival = float(st.submit[pending].min()) if pending.any() else math.inf
        waiting = np.flatnonzero(st.arrived & ~st.done)  # no job holds GPUs: every active job waits
        tq = st.t_queue[waiting]
        while True:
            g = (math.floor(t / round_s + _EPS) + 1) * round_s  # the loop's next grid round
            if not (g < horizon and next_arrival > g + _EPS):
                break
            dt = g - t
            if dt > 0 and len(tq):
                tq += dt
            t = g
        st.t_queue[waiting] = tq
        return t

    def _gpu_count(self, st: JobsState) -> np.ndarray:
        return np.where(st.shape >= 0, self.shape_replicas[np.maximum(st.shape, 0)], 0)

    def _fail_prob(self, st: JobsState, lam: float) -> np.ndarray | float:
        if self.physics.failure_scope == "job":
            return lam
        return 1.0 - (1.0 - lam) ** self._gpu_count(st)

    def _advance(self, st: JobsState, dt: float) -> None:
        if dt <= 0:
            return
        alloc = st.shape >= 0
        restoring = alloc & (st.restore_left > 0)
        ghost = alloc & st.ghost
        running = alloc & ~restoring & ~ghost
        waiting = st.arrived & ~st.done & ~alloc
        st.progress[running] += st.rate[running] * dt
        st.t_progress[running] += dt
        st.restore_left[restoring] -= dt
        st.t_ckpt[restoring] += dt
        st.t_queue[restoring | waiting | ghost] += dt
        g = self._gpu_count(st)
        st.gpu_s += g * dt
        st.gpu_lost[restoring | ghost] += g[restoring | ghost] * dt

    def _update_rates(self, st: JobsState) -> None:
        st.rate[:] = 0.0
        idx = np.flatnonzero((st.shape >= 0) & (st.restore_left <= 0) & ~st.ghost)
        if len(idx):
            e = self.tables.epochs(idx, st.progress[idx])
            st.epoch[idx] = e
            rows = self.tables.rows(idx, e)
            st.rate[idx] = self.tables.rate[rows, st.shape[idx]] / self.calibration[idx]

    def _fail(self, st: JobsState, idx: np.ndarray) -> None:
        ph = self.physics
        for i in idx:
            if ph.lost_work != "none":
                last_ckpt = st.ckpt_tprog[i]  # the last (re)start: "since-restart"
                if ph.lost_work == "since-checkpoint":
                    periodic = math.floor(st.t_progress[i] / ph.checkpoint_interval_s) * ph.checkpoint_interval_s
                    last_ckpt = max(last_ckpt, periodic)
                lost_t = max(0.0, float(st.t_progress[i] - last_ckpt))
                st.progress[i] = max(0.0, st.progress[i] - st.rate[i] * lost_t)
                st.t_progress[i] -= lost_t
                st.gpu_lost[i] += lost_t * self.shape_replicas[st.shape[i]]
                st.ckpt_tprog[i] = st.t_progress[i]
            st.failures[i] += 1
            st.restarts[i] += ph.failure_restarts
            st.rate[i] = 0.0
            if ph.failure_mode == "ghost":
                st.ghost[i] = True  # holds its GPUs, does nothing, until its allocation changes
                st.restore_left[i] = 0.0
            else:
                st.restore_left[i] = self.restore_delay[i]

    def snapshot(self, st: JobsState, t: float, active: np.ndarray, needs_node_goodput: bool = False) -> RoundSnapshot:
        """The policy's view of the active jobs at time t."""
        e = self.tables.epochs(active, st.progress[active])
        st.epoch[active] = e
        rows = self.tables.rows(active, e)
        shape_goodput = self.tables.goodput[rows]  # (J, S) raw goodput on every shape
        raw = shape_goodput[:, self.config_shape]
        valid = self.bounds[active] & (raw > 0)
        max_gpus = self.max_gpus[active]
        if self.physics.bootstrap or self.physics.exploration_cap:
            valid, max_gpus = self._explorable(valid, st.max_run_gpus[active], max_gpus)
        row_min = np.where(valid, raw, np.inf).min(axis=1)
        good = np.where(valid, raw / np.where(np.isfinite(row_min), row_min, 1.0)[:, None], 0.0)
        rate = self.tables.rate[rows][:, self.config_shape] / self.calibration[active, None]
        node_goodput = None
        if needs_node_goodput:
            node_goodput = np.zeros(
                (len(active), len(self.capacity), int(self.shape_nodes.max()) + 1, int(self.shape_replicas.max()) + 1)
            )
            node_goodput[:, self.shape_type, self.shape_nodes, self.shape_replicas] = shape_goodput
        held = np.zeros((len(active), len(self.cluster.nodes)), dtype=np.int64)
        owners = [pos for pos, i in enumerate(active) for _ in st.gpus[i]]
        if owners:  # one scatter for all jobs' GPUs: GPUs held per (job, node)
            gpu_ids = [g for i in active for g in st.gpus[i]]
            np.add.at(held, (np.array(owners), self.gpu_node[gpu_ids]), 1)
        snap = RoundSnapshot(
            time_s=t,
            configs=self.configs,
            gpu_types=self.cluster.gpu_types,
            config_type=self.config_type,
            config_gpus=self.config_gpus,
            capacity=self.capacity,
            job_names=tuple(self.names[active].tolist()),
            applications=tuple(self.app_names[active].tolist()),
            goodput=frozen_array(good, np.float64),
            valid=frozen_array(valid, bool),
            t_progress_s=frozen_array(st.t_progress[active], np.float64),
            t_ckpt_s=frozen_array(st.t_ckpt[active], np.float64),
            t_queue_s=frozen_array(st.t_queue[active], np.float64),
            age_s=frozen_array(t - st.submit[active], np.float64),
            restarts=frozen_array(st.restarts[active], np.int64),
            failures=frozen_array(st.failures[active], np.int64),
            current=frozen_array(st.config[active], np.int64),
            restoring=frozen_array((st.shape[active] >= 0) & (st.restore_left[active] > 0), bool),
            restart_penalty_s=frozen_array(self.penalty[active], np.float64),
            attained_gpu_s=frozen_array(st.gpu_s[active], np.float64),
            min_gpus=frozen_array(self.min_gpus[active], np.int64),
            max_gpus=frozen_array(max_gpus, np.int64),
            requested_gpus=frozen_array(self.requested[active], np.int64),
            progress_rate=frozen_array(np.where(valid, rate, 0.0), np.float64),
            remaining_work=frozen_array(self.total[active] - st.progress[active], np.float64),
            total_work=frozen_array(self.total[active], np.float64),
            node_type=self.node_type,
            node_gpus=self.node_gpus,
            current_replicas=frozen_array(held, np.int64),
            node_goodput=None if node_goodput is None else frozen_array(node_goodput, np.float64),
            policy_state=st.policy_state,
        )
        return snap if self.physics.restores_preemptible else dataclasses.replace(snap, kept=kept_while_restoring(snap))

    def _explorable(self, valid: np.ndarray, ran: np.ndarray, max_gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the artifact's rules let a job be offered: only its smallest configurations before it has run
        (bootstrap), at most 2× the most GPUs it has run on after (exploration cap); (valid, max GPUs)."""
        gpus = self.config_gpus[None, :]
        fewest = np.where(valid, gpus, np.iinfo(np.int64).max).min(axis=1)
        limit = np.full(len(ran), np.iinfo(np.int64).max)
        if self.physics.bootstrap:
            limit = np.where(ran == 0, fewest, limit)
        if self.physics.exploration_cap:
            limit = np.where(ran > 0, np.maximum(2 * ran, fewest), limit)
        return valid & (gpus <= limit[:, None]), np.minimum(max_gpus, limit)

    def _decide(
        self,
        st: JobsState,
        t: float,
        active: np.ndarray,
        policy: Policy,
        decision_ms: list[float],
        on_round: RoundObserver | None,
    ) -> None:
        snap = self.snapshot(st, t, active, bool(getattr(policy, "needs_node_goodput", False)))
        start = time.perf_counter()
        alloc = policy.decide(snap)
        decision_ms.append((time.perf_counter() - start) * 1e3)
        st.policy_state = alloc.state
        shapes, placed = self.plan(snap, alloc, policy.name, st, active)
        if on_round is not None:
            on_round(snap, alloc, placed)
        for pos, i in enumerate(active):
            new = int(shapes[pos])
            if new < 0:
                if st.shape[i] >= 0:
                    st.shape[i] = -1
                    st.config[i] = -1
                    st.gpus[i] = ()
                    st.restore_left[i] = 0.0
                    st.ckpt_tprog[i] = st.t_progress[i]
                continue
            if new != st.shape[i] or placed[pos] != st.gpus[i]:
                st.ghost[i] = False
                st.max_run_gpus[i] = max(int(st.max_run_gpus[i]), int(self.shape_replicas[new]))
                if (
                    self.physics.restart_on == "shape"
                    and st.shape[i] >= 0
                    and self._per_node(st.gpus[i]) == self._per_node(placed[pos])
                ):
                    st.gpus[i] = placed[pos]  # same GPU type and GPUs per node: moved, not restarted
                    st.shape[i] = new
                    st.config[i] = self.shape_config[new]
                    continue
                if st.started[i]:
                    st.restarts[i] += 1
                st.started[i] = True
                st.shape[i] = new
                st.config[i] = self.shape_config[new]
                st.gpus[i] = placed[pos]
                st.restore_left[i] = self.restore_delay[i]
                st.ckpt_tprog[i] = st.t_progress[i]  # a move checkpoints first: the restart resumes from here
                if self.physics.queue_clock == "since-last-run":
                    st.t_queue[i] = 0.0

    def _per_node(self, gpus: GpuSet) -> tuple[int, tuple[int, ...]]:
        """A placement's per-node shape: its GPU type and its sorted GPU counts per node."""
        nodes = self.gpu_node[list(gpus)]
        counts = np.bincount(nodes)
        return int(self.node_type[nodes[0]]), tuple(sorted(counts[counts > 0].tolist()))

    def plan(
        self, snap: RoundSnapshot, alloc: Allocation, name: str, st: JobsState, active: np.ndarray
    ) -> tuple[np.ndarray, list[GpuSet]]:
        """Validate policy ``name``'s allocation and place it: each active job's shape index (−1: none) and GPU ids.

        Raises RuntimeError on an allocation that breaks validity, capacity or the one-type rule."""
        if alloc.replicas is not None:
            return self._apply_replicas(snap, alloc, name, snap.time_s, active, st)
        return self._apply_configs(snap, alloc, name, snap.time_s, active, st)

    def _apply_configs(
        self, snap: RoundSnapshot, alloc: Allocation, name: str, t: float, active: np.ndarray, st: JobsState
    ) -> tuple[np.ndarray, list[GpuSet]]:
        choice = np.asarray(alloc.config, dtype=np.int64)
        if choice.shape != (len(active),):
            raise RuntimeError(f"policy {name!r} returned {choice.shape} choices for {len(active)} jobs")
        if snap.kept is not None:
            choice = self._hold_kept(snap, choice)
        chosen = np.flatnonzero(choice >= 0)
        if np.any(choice >= len(self.configs)) or not np.all(snap.valid[chosen, choice[chosen]]):
            raise RuntimeError(f"policy {name!r} chose an invalid configuration at t={t}")
        used = np.zeros(len(self.capacity), dtype=np.int64)
        np.add.at(used, self.config_type[choice[chosen]], self.config_gpus[choice[chosen]])
        if np.any(used > self.capacity):
            raise RuntimeError(f"policy {name!r} exceeded GPU capacity at t={t}")
        new_cfgs = [self.configs[c] if c >= 0 else None for c in choice]
        old_cfgs = [self.configs[st.config[i]] if st.config[i] >= 0 else None for i in active]
        placed = place(self.cluster, new_cfgs, [st.gpus[i] for i in active], old_cfgs)
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
            if np.all(used <= self.capacity):
                break
            out[pos] = -1
        return out

    def _apply_replicas(
        self, snap: RoundSnapshot, alloc: Allocation, name: str, t: float, active: np.ndarray, st: JobsState
    ) -> tuple[np.ndarray, list[GpuSet]]:
        rep = np.asarray(alloc.replicas, dtype=np.int64)
        if rep.shape != (len(active), len(self.cluster.nodes)) or np.any(rep < 0):
            raise RuntimeError(f"policy {name!r} returned replicas of shape {rep.shape} (or negative) at t={t}")
        if np.any(rep.sum(axis=0) > self.node_gpus):
            raise RuntimeError(f"policy {name!r} exceeded a node's GPUs at t={t}")
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
                raise RuntimeError(f"policy {name!r} gave job {snap.job_names[pos]!r} an invalid placement at t={t}")
            shapes[pos] = shape
        placed = place_replicas(self.cluster, rep.tolist(), [st.gpus[i] for i in active])
        return shapes, placed


def simulate(
    workload: Workload,
    policy: Policy,
    failure_rate: float = 0.0,
    seed: int = 0,
    cluster: Cluster | None = None,
    physics: PhysicsOptions | None = None,
    catalog: Catalog | None = None,
) -> RunResult:
    """One run: convenience wrapper around ``Simulator(...).run(...)``."""
    return Simulator(workload, cluster, catalog, physics).run(policy, failure_rate, seed)
