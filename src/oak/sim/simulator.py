"""Event-driven simulation of a GPU cluster running a workload under one policy.

Rounds fall on a fixed grid (every ``round_s``) and happen immediately when the job set changes (arrival,
completion, failure). Between events every job's state changes linearly, so the simulator jumps from
event to event. Failures are paired across policies: in grid interval k, job j fails at
k·round_s + round_s·v(seed, j, k) if u(seed, j, k) < λ and it holds GPUs at that instant, with u, v
counter-based uniforms (``oak.failures.rng``) that do not depend on the policy.

Idle stretches are fast-forwarded exactly: once a decision leaves every job without GPUs (and none held GPUs
before it), nothing can change until the next arrival, except the clock and the waiting jobs' T_queue. If the
policy declares that it does not read the clock (``reads_clock`` False, ``oak.policies.base``), or no job is
active, each grid round up to the next arrival (or the horizon) would repeat the same decision; the simulator
then only accumulates T_queue over those rounds, in the same per-round steps (bit-identical sums), without
building snapshots or calling the policy. With an ``on_round`` observer no round is skipped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from oak.catalog import AppProfile, Catalog
from oak.engine.beliefs import Beliefs, RunBeliefs
from oak.engine.ledger import JobsState
from oak.engine.metrics import JobResult, RunResult
from oak.engine.model import ClusterModel
from oak.engine.reasons import RoundReasons, round_reasons
from oak.engine.rules import PhysicsOptions, advised_checkpoint_interval, checkpoint_interval
from oak.engine.step import Intent, step
from oak.errors import OakInputError
from oak.failures import FailureStream, failure_model, rng
from oak.failures.hardware import HardwareModel, parse_failure_model
from oak.model.cluster import Cluster
from oak.model.snapshot import Allocation, RoundSnapshot
from oak.placement.placer import GpuSet
from oak.policies.base import Policy
from oak.sim import learning
from oak.workloads import Workload

RoundObserver = Callable[[RoundSnapshot, Allocation, list[GpuSet]], None]
ReasonsObserver = Callable[[RoundReasons], None]
ProgressObserver = Callable[[float, int, int], None]
"""Called with (simulated time in s, jobs finished, jobs in the workload) at the start of a run, whenever jobs
finish, and at its end."""

_EPS = 1e-9


class Simulator:
    """The simulation driver: a workload on a cluster (one :class:`~oak.engine.model.ClusterModel`) under
    physics options; ``run`` simulates one (policy, failure rate, seed), enacting each round's
    :class:`~oak.engine.step.Plan` by advancing time analytically. Same inputs ⇒ bit-identical results."""

    def __init__(
        self,
        workload: Workload,
        cluster: Cluster | None = None,
        catalog: Catalog | None = None,
        physics: PhysicsOptions | None = None,
        *,
        idle_fast_forward: bool = True,
        believed: Mapping[str, AppProfile] | None = None,
        restore_s: Mapping[str, float] | None = None,
        learn: Collection[str] = (),
        warm_start: bool = True,
        first_start_s: Mapping[str, float] | None = None,
        stop_s: Mapping[str, float] | None = None,
        exit_s: Mapping[str, float] | None = None,
        lost_s: Mapping[str, float] | None = None,
        credit_s: Mapping[str, tuple[float, float]] | None = None,
        arrival_lag_s: Mapping[str, float] | None = None,
        counted_s: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        """``warm_start``: hand each round's solver prices to the next round (``RoundSnapshot.solver_prices``);
        False solves every round cold (the reference of ``oak bench sim``). ``idle_fast_forward``: skip the provably unchanged rounds of idle stretches (module docstring); False
        steps and decides round by round (same results, for tests). ``believed``: job name → the application
        whose goodput the policy sees for that job, instead of its true one (:class:`RunBeliefs`; under
        known goodput only); ``learn``: jobs whose goodput the policy learns online as the run goes, under the
        exploration cap (:class:`RunBeliefs`; the others' is known). ``restore_s``: job name → its restore delay (s) at every (re)start and failure,
        instead of the physics rule's (a measured one: ``oak replay``); the policy still sees its P_restart.
        A real run's latencies (``oak replay``): ``first_start_s``, job name → its delay at its first start
        (no checkpoint to read; default its restore delay); ``stop_s``, job name → the seconds it takes to
        checkpoint and exit when stopped or moved, during which its GPUs are not free: a job started on them
        (or the moved job itself) waits that long before its restore begins, as the runtime launches it;
        ``exit_s``, job name → the seconds from its last step until it is done (its last checkpoint, its exit):
        meanwhile it holds its GPUs with no work left, kept where it is; ``lost_s``, job name → the seconds of
        running a failure loses (at most its running since its last (re)start), where the physics loses none;
        ``credit_s``, job name → the running (s) its delay at its first start and at a restart includes: the
        steps it took before the run's scheduler saw it past its resume step, at most the delay. The delay is
        then the one the scheduler saw (rounds meanwhile find the job restoring), and at its end the job is that
        much further (its time in running unchanged); ``arrival_lag_s``, job name → the seconds from its submission
        until the run's scheduler took it in (its tick): it arrives that much later, its JCT still counts from its
        submission and its queueing from its arrival, as the runtime counts them; ``counted_s``, job name → the
        restore time (s) the run's scheduler counted (its T_ckpt) at its first start and at a restart, at most the
        delay: the rest of the delay counts as running (T_progress), not restoring or queueing, as the runtime
        counts the tick that saw the job past its resume step."""
        self.model = ClusterModel(workload, cluster, catalog, physics)
        self._ckpt: _Checkpoints | None = None
        self._index = {j.name: i for i, j in enumerate(workload.jobs)}
        for name, value in (restore_s or {}).items():
            self.model.restore_delay[self._job_index(name, value, "restore delay")] = float(value)
        self._first_start = self.model.restore_delay.copy()
        for name, value in (first_start_s or {}).items():
            self._first_start[self._job_index(name, value, "first start delay")] = float(value)
        self._lost = self._per_job(lost_s, "work lost per failure")
        # (first start's, a restart's) by job: the running credited when a delay ends, and the part of the
        # delay counted as running then (``counted_s``: the delay less the restore the run counted)
        self._credit = self._per_job_pair(credit_s, "start credit")
        self._credit_left = np.zeros(0)
        delays = (self._first_start, self.model.restore_delay)  # a job not given counts its whole delay
        counted = self._per_job_pair(counted_s, "counted restore", delays)
        self._uncounted: tuple[np.ndarray, np.ndarray] | None = None
        if counted is not None:
            self._uncounted = (np.maximum(delays[0] - counted[0], 0.0), np.maximum(delays[1] - counted[1], 0.0))
        self._uncounted_left = np.zeros(0)
        self._exit = self._per_job(exit_s, "exit latency")
        self._arrival_lag = self._per_job(arrival_lag_s, "arrival lag")
        self._exit_at = np.zeros(0)  # when each job's exit after its last step ends (inf: not exiting)
        self._stop = self._per_job(stop_s, "stop latency")
        self._free_at: dict[int, float] = {}  # GPU → when a stopping job releases it (a run's stop latencies)
        self.idle_fast_forward = idle_fast_forward
        self.warm_start = warm_start
        self.believed = dict(believed or {})
        unknown = sorted(set(self.believed) - {j.name for j in workload.jobs})
        if unknown:
            raise OakInputError(f"believed goodput of job(s) {', '.join(unknown)}: not in the workload")
        self.learn = set(learn)
        unknown = sorted(self.learn - {j.name for j in workload.jobs} | (self.learn & set(self.believed)))
        if unknown:
            raise OakInputError(f"learned goodput of job(s) {', '.join(unknown)}: not in the workload, or believed")
        if (self.believed or self.learn) and self.model.learned:
            raise OakInputError("believed goodput is given under known goodput only (--goodput learned learns it)")
        if self.learn:
            self.model.explore = np.array([j.name in self.learn for j in workload.jobs])

    def _per_job(self, values: Mapping[str, float] | None, what: str) -> np.ndarray | None:
        """(N,) ``values`` by job (0 for the others); None where none is given."""
        if not values:
            return None
        out = np.zeros(self.model.n)
        for name, value in values.items():
            out[self._job_index(name, value, what)] = float(value)
        return out

    def _per_job_pair(
        self,
        values: Mapping[str, tuple[float, float]] | None,
        what: str,
        others: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(N,) and (N,): ``values``' (first start's, a restart's) by job (``others``' for the other jobs, default
        0); None where none is given."""
        if not values:
            return None
        out = (
            (np.zeros(self.model.n), np.zeros(self.model.n)) if others is None else (others[0].copy(), others[1].copy())
        )
        for name, pair in values.items():
            first, again = (float(x) for x in pair)
            if name not in self._index or not (0 <= first < math.inf and 0 <= again < math.inf):
                raise OakInputError(f"{what} of job {name!r}: {pair!r}: expected a job of the workload, >= 0 s")
            out[0][self._index[name]], out[1][self._index[name]] = first, again
        return out

    def _job_index(self, name: str, value: float, what: str) -> int:
        if name not in self._index or not (math.isfinite(value) and value >= 0):
            raise OakInputError(f"{what} of job {name!r}: {value!r}: expected a job of the workload, >= 0 s")
        return self._index[name]

    # ------------------------------------------------------------------ run
    def run(
        self,
        policy: Policy,
        failure_rate: float = 0.0,
        seed: int = 0,
        on_round: RoundObserver | None = None,
        on_reasons: ReasonsObserver | None = None,
        on_progress: ProgressObserver | None = None,
    ) -> RunResult:
        """Simulate the workload under ``policy`` at failure rate λ = ``failure_rate`` with ``seed``'s failures.
        ``on_round`` sees every decided round's snapshot, allocation and placement; ``on_reasons`` every round's
        reasons (``oak.engine.reasons``: why each job waits or runs below its maximum). With either, no round is
        skipped. ``on_progress`` (a progress bar: :data:`ProgressObserver`) changes nothing in the run."""
        if not (math.isfinite(failure_rate) and 0.0 <= failure_rate <= 1.0):
            raise OakInputError(f"failure rate {failure_rate!r}: expected a probability in [0, 1]")
        if (problem := rng.seed_problem(seed)) is not None:
            raise OakInputError(f"seed {problem}")
        wall_start = time.perf_counter()
        ph = self.model.physics
        n = self.model.n
        base_submit = np.array([j.submit_time_s for j in self.model.workload.jobs], dtype=np.float64)
        if ph.arrival_jitter_s > 0:
            base_submit = base_submit + ph.arrival_jitter_s * rng.uniforms(seed, rng.STREAM_ARRIVAL, self.model.keys, 0)
        if self._arrival_lag is not None:
            base_submit = base_submit + self._arrival_lag
        st = JobsState.initial(base_submit)
        st.handover_left = np.zeros(n)
        self._free_at = {}
        self._exit_at = np.full(n, np.inf)
        self._credit_left = np.zeros(n)
        self._uncounted_left = np.zeros(n)
        if self.model.learned:
            st.beliefs = Beliefs(self.model.table, self.model.apps)
        elif self.believed or self.learn:
            specs = self.model.workload.jobs
            given = [self.believed.get(j.name) for j in specs]
            learn = [j.name in self.learn for j in specs]
            st.beliefs = RunBeliefs(self.model.table, self.model.apps, given, learn, self.model.total)
        round_s = ph.round_s
        t = float(st.submit.min())
        interval = -1
        fail_time = np.full(n, np.inf)
        fail_u = np.ones(n)
        stream = FailureStream(seed, self.model.keys, round_s)
        failures = failure_model(ph.failure_scope, failure_rate)
        hw = parse_failure_model(ph.failure_model)
        hw_on = hw.active
        if hw.trace is not None:  # a failure log's lines name jobs and nodes of this workload and cluster
            hw.trace.check_jobs({j.name for j in self.model.workload.jobs}, f"workload {self.model.workload.name!r}")
            hw.trace.check_nodes(len(self.model.cluster.nodes), f"cluster {self.model.cluster.name!r}")
        index = self._index
        logged: list[tuple[float, int]] = []  # the failure log's job lines of the current interval, by time
        first_interval = True
        n_nodes = len(self.model.cluster.nodes)
        down_until = np.zeros(n_nodes)
        st.node_down = np.zeros(n_nodes, bool)
        st.node_failures = np.zeros(n_nodes, np.int64)
        hw_pending: list[tuple[float, tuple[int, ...], float]] = []
        hw_log: list[float] = []
        sw_u = sw_time = np.ones(n)
        sw_p = 0.0
        node_rate_s = float(hw.node_rates(seed, n_nodes).mean()) if hw.hardware else 0.0
        st.ckpt_period = np.full(n, np.inf)
        st.gpu_ckpt = np.zeros(n)
        st.gpu_lost_work = np.zeros(n)
        self._ckpt = (
            _Checkpoints(ph, failures, failure_rate, hw, node_rate_s, t) if ph.checkpoint_policy != "implicit" else None
        )
        decision_ms: list[float] = []
        # no fast-forward under hardware failures: repairs change the capacity, and every interval's events count
        skip_idle = self.idle_fast_forward and on_round is None and on_reasons is None and not hw_on
        clock_free = skip_idle and not policy.reads_clock
        immediate = not ph.fixed_steps  # re-decide on arrival, completion and failure, not only on the grid
        decide = immediate or abs(t - round(t / round_s) * round_s) <= _EPS * max(1.0, t)
        st.arrived |= st.submit <= t + _EPS
        if on_progress is not None:
            on_progress(t, 0, n)
        while True:
            k = math.floor(t / round_s + _EPS)
            if k != interval:
                interval = k
                fail_u, fail_time = stream.interval(k)  # a fresh array: failures that fired are marked inf
                if hw_on:
                    hw_pending = hw.interval_events(seed, n_nodes, k, round_s, first=first_interval)
                    first_interval = False
                    logged = [(when, index[name]) for when, name in hw.logged_job_failures(k, round_s)]
                    if logged and self._fire_logged(st, t, logged):  # at the very start of the interval: now
                        decide = decide or immediate
                    sw_u, sw_time, sw_p = hw.software_draws(seed, self.model.keys, k, round_s)
                    # events at the very start of the interval (or before a run that starts inside it) happen now
                    if self._hardware_events(st, t, hw, hw_pending, hw_log, down_until, node_rate_s):
                        decide = decide or immediate
            idle = False
            if decide:
                active = np.flatnonzero(st.arrived & ~st.done)
                if len(active):
                    idle_before = not bool((st.shape >= 0).any())
                    state_before = st.policy_state
                    if self._ckpt is not None:  # what failures and checkpoints cost in each configuration
                        self._ckpt.exposure(self.model, st, t, active)
                    self._decide(st, t, active, policy, decision_ms, on_round, seed, on_reasons)
                    if self._ckpt is not None:
                        self._ckpt.periods(self.model, st, t)
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
            if self._exit is not None and np.isfinite(self._exit_at).any():
                candidates.append(float(self._exit_at.min()))
            finishing = running & (st.rate > 0)
            if finishing.any():
                candidates.append(t + float(((self.model.total - st.progress)[finishing] / st.rate[finishing]).min()))
            if failure_rate > 0:
                p_fail = failures.probability(self._gpu_count(st))
                cand = alloc & ~st.ghost & (fail_time > t) & (fail_u < p_fail)
                if cand.any():
                    candidates.append(float(fail_time[cand].min()))
            if hw_on:
                later = [e for e, _, _ in hw_pending if e > t + _EPS * max(1.0, t)]
                if later:
                    candidates.append(min(later))
                repairing = down_until > t
                if repairing.any():
                    candidates.append(float(down_until[repairing].min()))
                cand = alloc & ~st.ghost & (sw_time > t) & (sw_u < sw_p)
                if cand.any():
                    candidates.append(float(sw_time[cand].min()))
                later_logged = [when for when, _ in logged if when > t + _EPS * max(1.0, t)]
                if later_logged:
                    candidates.append(min(later_logged))
            t_next = min(candidates)
            self._advance(st, t_next - t)
            t = t_next
            # ---- events at t
            exited = None
            if self._exit is not None:  # jobs whose exit after their last step ends now
                exited = np.isfinite(self._exit_at) & (self._exit_at <= t + _EPS * max(1.0, t))
                if exited.any():
                    self._exit_at[exited] = np.inf
                    st.pinned[exited] = False
                    finishing = finishing | exited
            if finishing.any():
                left = (self.model.total - st.progress) / np.where(st.rate > 0, st.rate, np.inf)
                fin = finishing & ((left <= _EPS * np.maximum(1.0, t)) | (st.progress >= self.model.total))
                if fin.any() and exited is not None:  # its last step taken: it holds its GPUs while it exits
                    assert self._exit is not None
                    slow = fin & (self._exit > 0) & ~exited
                    if slow.any():
                        st.progress[slow] = self.model.total[slow]
                        self._exit_at[slow] = t + self._exit[slow]
                        st.pinned[slow] = True
                        st.rate[slow] = 0.0
                        fin = fin & ~slow
                if fin.any():
                    st.progress[fin] = self.model.total[fin]
                    st.done |= fin
                    st.finish[fin] = t
                    for i in np.flatnonzero(fin):
                        st.config[i] = -1
                        st.shape[i] = -1
                        st.gpus[i] = ()
                        st.restore_left[i] = 0.0
                        st.handover_left[i] = 0.0
                        st.ghost[i] = False
                    decide = decide or immediate
                    if on_progress is not None:
                        on_progress(t, int(st.done.sum()), n)
            restored = (st.restore_left > 0) & (st.restore_left <= _EPS * max(1.0, t))
            st.restore_left[restored] = 0.0
            if self._credit is not None or self._uncounted is not None:
                # a (re)start's delay over (``restored`` misses one that hit 0 exactly)
                owed = (self._credit_left > 0) | (self._uncounted_left > 0)
                over = owed & (st.shape >= 0) & ~st.ghost & (st.restore_left <= _EPS * max(1.0, t))
                if over.any():
                    self._take_credit(st, np.flatnonzero(over))
            if self._stop is not None:
                st.handover_left[restored] = 0.0
            if failure_rate > 0:
                p_fail = failures.probability(self._gpu_count(st))
                hit = (st.shape >= 0) & ~st.ghost & (np.abs(fail_time - t) <= _EPS * max(1.0, t)) & (fail_u < p_fail)
                if hit.any():
                    self._fail(st, np.flatnonzero(hit))
                    fail_time[hit] = np.inf
                    decide = decide or immediate
            if hw_on and self._hardware_events(st, t, hw, hw_pending, hw_log, down_until, node_rate_s):
                decide = decide or immediate
            if hw_on and sw_p > 0:
                hit = (st.shape >= 0) & ~st.ghost & (np.abs(sw_time - t) <= _EPS * max(1.0, t)) & (sw_u < sw_p)
                if hit.any():
                    for j in np.flatnonzero(hit).tolist():
                        self._lose_work(st, int(j), node_rate_s, hw)
                    self._fail(st, np.flatnonzero(hit))
                    sw_time[hit] = np.inf
                    decide = decide or immediate
            if logged and self._fire_logged(st, t, logged):
                decide = decide or immediate
            newly = ~st.arrived & (st.submit <= t + _EPS)
            if newly.any():
                st.arrived |= newly
                decide = decide or immediate
            if t >= (k + 1) * round_s - _EPS:
                decide = True
        end = t
        if on_progress is not None:
            on_progress(end, int(st.done.sum()), n)
        submitted = st.submit if self._arrival_lag is None else st.submit - self._arrival_lag
        jobs = tuple(
            JobResult(
                name=spec.name,
                application=spec.application,
                submit_s=float(submitted[i]),
                jct_s=float(st.finish[i] - submitted[i]) if st.done[i] else None,
                restarts=int(st.restarts[i]),
                failures=int(st.failures[i]),
                t_progress_s=float(st.t_progress[i]),
                t_ckpt_s=float(st.t_ckpt[i]),
                t_queue_s=float(st.t_queue[i]),
                gpu_s_used=float(st.gpu_s[i]),
                gpu_s_lost=float(st.gpu_lost[i]),
                gpu_s_ckpt=float(st.gpu_ckpt[i]),
                gpu_s_lost_work=float(st.gpu_lost_work[i]),
            )
            for i, spec in enumerate(self.model.workload.jobs)
        )
        last = float(np.nanmax(st.finish)) if st.done.all() else end
        return RunResult(
            policy=policy.name,
            workload=self.model.workload.name,
            failure_rate=failure_rate,
            seed=seed,
            jobs=jobs,
            decision_ms=tuple(decision_ms),
            makespan_s=last - float(submitted.min()),
            end_time_s=end,
            wall_s=time.perf_counter() - wall_start,
            failure_model=hw.describe() if hw_on else "",
            hardware_events=tuple(hw_log),
        )

    # ------------------------------------------------------------ helpers
    def _fast_forward(self, st: JobsState, t: float) -> float:
        """Step from ``t`` over the grid rounds whose decision is skipped, with no job holding GPUs: those the
        event loop would reach next (same ``k``, same round times) that fall before the horizon and bring no
        arrival. Only T_queue of the waiting jobs changes, by the loop's per-round ``dt`` (same float sums); the
        loop then resumes at the last skipped round with nothing to decide. Returns the new time."""
        round_s, horizon = self.model.physics.round_s, self.model.physics.horizon_s
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
        return np.where(st.shape >= 0, self.model.shape_replicas[np.maximum(st.shape, 0)], 0)

    def _hardware_events(
        self,
        st: JobsState,
        t: float,
        hw: HardwareModel,
        pending: list[tuple[float, tuple[int, ...], float]],
        log: list[float],
        down_until: np.ndarray,
        node_rate_s: float,
    ) -> bool:
        """Repairs that end at ``t`` and node or domain failures at ``t``; True if the cluster changed. A failed
        node is out of service for ``repair_s``; every job with a GPU on it fails, loses the work since its last
        checkpoint and its GPUs, and is placed again by the next decision (its restart counts then)."""
        tol = _EPS * max(1.0, t)
        changed = False
        back = st.node_down & (down_until <= t + tol)
        if back.any():
            st.node_down[back] = False
            down_until[back] = 0.0
            changed = True
        while pending and pending[0][0] <= t + tol:
            when, nodes, down_s = pending.pop(0)
            fresh = [j for j in nodes if not st.node_down[j]]
            if not fresh:
                continue
            log.append(when)
            st.node_failures[fresh] += 1  # observed: a real scheduler sees which nodes failed
            if when + down_s <= t + tol:  # a logged node line whose downtime ended before the run reached it
                continue
            st.node_down[fresh] = True
            down_until[fresh] = when + down_s
            changed = True
            gone = set(fresh)
            hit = [
                i
                for i in np.flatnonzero(st.shape >= 0).tolist()
                if any(int(self.model.gpu_node[g]) in gone for g in st.gpus[i])
            ]
            for i in hit:
                self._end_exit(st, i)
                self._lose_work(st, i, node_rate_s, hw)
                st.failures[i] += 1
                st.rate[i] = 0.0
                st.shape[i] = -1
                st.config[i] = -1
                st.gpus[i] = ()
                st.restore_left[i] = 0.0
                st.handover_left[i] = 0.0
                st.ghost[i] = False
                st.ckpt_tprog[i] = st.t_progress[i]
        return changed

    def _lose_work(self, st: JobsState, i: int, node_rate_s: float, hw: HardwareModel) -> None:
        """Progress since the job's last checkpoint is lost: checkpoints every ``checkpoint_interval_s`` with
        ``lost_work="since-checkpoint"``, else every Young/Daly interval √(2·P_restart·MTBF) of productive time,
        MTBF = 1 / (its nodes × the mean node rate + its racks × the domain rate + its software rate); a job
        whose P_restart is 0 checkpoints for free and loses nothing. The lost progress is valued at the job's
        rate on its configuration (also while it restores, when it makes none)."""
        ph = self.model.physics
        if self._ckpt is not None:  # periodic checkpoints: the progress since the last one is lost
            self._lose_to_checkpoint(st, i, float(self._shape_rates(st, np.array([i]))[0]))
            return
        if ph.lost_work == "since-checkpoint":
            interval = ph.checkpoint_interval_s
        elif hw.trace is not None:  # a logged node loss: the run's lost-work rule, as for every other failure
            if ph.lost_work == "none":
                st.ckpt_tprog[i] = st.t_progress[i]
                return
            interval = math.inf  # "since-restart"
        else:
            nodes = {int(self.model.gpu_node[g]) for g in st.gpus[i]}
            racks = {n // hw.domain_nodes for n in nodes} if hw.domain_nodes > 0 else set()
            rate = (
                len(nodes) * node_rate_s
                + len(racks) * hw.domain_rate / 1000.0 * hw.scale / 86_400.0
                + hw.software_rate / 1000.0 * hw.scale / 3600.0
            )
            penalty = float(self.model.penalty[i])
            if penalty <= 0:
                return
            interval = math.sqrt(2.0 * penalty / rate) if rate > 0 else math.inf
        self._lose_since(st, i, interval, float(self._shape_rates(st, np.array([i]))[0]))

    def _fire_logged(self, st: JobsState, t: float, logged: list[tuple[float, int]]) -> bool:
        """The failure log's job lines due at ``t`` (popped from ``logged``): each fails its job if the job holds
        GPUs (once per instant). True if a job failed."""
        fired: list[int] = []
        while logged and logged[0][0] <= t + _EPS * max(1.0, t):
            _, j = logged.pop(0)
            if st.shape[j] >= 0 and not st.ghost[j] and j not in fired:
                fired.append(j)
        if fired:
            self._fail(st, np.array(fired))
        return bool(fired)

    def _lose_to_checkpoint(self, st: JobsState, i: int, rate: float) -> None:
        """A failure of job ``i`` under periodic checkpoints: the progress since its last checkpoint is lost, valued
        at progress ``rate``; under "lossless" nothing is (it resumes where it failed)."""
        assert self._ckpt is not None
        if self._ckpt.lossless:
            st.ckpt_tprog[i] = st.t_progress[i]
        else:
            self._lose_since(st, i, float(st.ckpt_period[i]), rate, timer=True)

    def _lose_since(
        self, st: JobsState, i: int, interval: float, rate: float, at_most: float = math.inf, timer: bool = False
    ) -> None:
        """A failure of job ``i`` (which holds GPUs) loses the running time since its last checkpoint — its last
        (re)start, or the last multiple of ``interval`` s of running (inf: none), or ``at_most`` s before now —
        at progress ``rate``, and it resumes from there. ``timer``: the multiples count from its last checkpoint
        (``ckpt_tprog``: periodic checkpoints every ``interval`` s of running since the last one), not from 0."""
        last = st.ckpt_tprog[i]
        if math.isfinite(interval) and interval > 0:
            if timer:
                last = last + math.floor((st.t_progress[i] - last) / interval) * interval
            else:
                last = max(last, math.floor(st.t_progress[i] / interval) * interval)
        lost_t = max(0.0, min(float(st.t_progress[i] - last), at_most))
        if lost_t > 0:
            gpus = self.model.shape_replicas[st.shape[i]]
            st.progress[i] = max(0.0, st.progress[i] - rate * lost_t)
            st.t_progress[i] -= lost_t
            st.gpu_lost[i] += lost_t * gpus
            st.gpu_lost_work[i] += lost_t * gpus
        st.ckpt_tprog[i] = st.t_progress[i]

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
        if self._stop is None:
            st.t_ckpt[restoring] += dt
        else:  # the part spent waiting for a stopping job to release its GPUs is queueing
            hand = np.minimum(dt, st.handover_left[restoring])
            st.handover_left[restoring] -= hand
            st.t_ckpt[restoring] += dt - hand
        st.t_queue[restoring | waiting | ghost] += dt
        g = self._gpu_count(st)
        st.gpu_s += g * dt
        st.gpu_lost[restoring | ghost] += g[restoring | ghost] * dt
        if self._ckpt is not None:  # the share of running time spent writing checkpoints
            period = st.ckpt_period[running]
            share = np.where(np.isfinite(period), self.model.ckpt_write[running] / period, 0.0)
            st.gpu_ckpt[running] += g[running] * dt * share

    def _update_rates(self, st: JobsState) -> None:
        st.rate[:] = 0.0
        runs = (st.shape >= 0) & (st.restore_left <= 0) & ~st.ghost
        idx = np.flatnonzero(runs if self._exit is None else runs & ~st.pinned)  # pinned: exiting, no work left
        if len(idx):
            st.rate[idx] = self._shape_rates(st, idx, record_epoch=True)
            if self._ckpt is not None:  # no progress while a checkpoint is written
                period = st.ckpt_period[idx]
                st.rate[idx] *= np.where(np.isfinite(period), 1.0 - self.model.ckpt_write[idx] / period, 1.0)

    def _shape_rates(self, st: JobsState, idx: np.ndarray, record_epoch: bool = False) -> np.ndarray:
        """Progress rates of jobs ``idx`` on their current shapes at their current epochs."""
        e, rates = self.model.progress_rates(st, idx)
        if record_epoch:
            st.epoch[idx] = e
        return rates

    def _take_credit(self, st: JobsState, idx: np.ndarray) -> None:
        """Jobs ``idx`` end their (re)start's delay: the steps they took during it, at the rate of their shape."""
        credit = self._credit_left[idx]
        self._credit_left[idx] = 0.0
        rate = self._shape_rates(st, idx)
        st.progress[idx] = np.minimum(st.progress[idx] + rate * credit, self.model.total[idx])
        # the end of the delay the run's scheduler counted as running (``counted_s``)
        shift = np.minimum(self._uncounted_left[idx], st.t_ckpt[idx])
        self._uncounted_left[idx] = 0.0
        st.t_ckpt[idx] -= shift
        st.t_queue[idx] = np.maximum(st.t_queue[idx] - shift, 0.0)
        st.t_progress[idx] += shift

    def _end_exit(self, st: JobsState, i: int) -> None:
        """A job failed while exiting after its last step: it is no longer exiting (it restarts as any job)."""
        if self._exit is not None and math.isfinite(self._exit_at[i]):
            self._exit_at[i] = np.inf
            st.pinned[i] = False

    def _fail(self, st: JobsState, idx: np.ndarray) -> None:
        ph = self.model.physics
        for i in idx:
            self._end_exit(st, int(i))
            if self._ckpt is not None:
                self._lose_to_checkpoint(st, int(i), float(st.rate[i]))
            elif self._lost is not None and self._lost[i] > 0:  # a run's measured loss per failure
                self._lose_since(st, int(i), math.inf, float(st.rate[i]), at_most=float(self._lost[i]))
            elif ph.lost_work != "none":  # "since-restart": from the last (re)start only
                every = ph.checkpoint_interval_s if ph.lost_work == "since-checkpoint" else math.inf
                self._lose_since(st, int(i), every, float(st.rate[i]))
            else:
                st.ckpt_tprog[i] = st.t_progress[i]  # nothing lost: the job resumes from where it failed
            st.failures[i] += 1
            st.rate[i] = 0.0
            st.handover_left[i] = 0.0
            if ph.failure_mode == "requeue":  # gives its GPUs up; its relaunch, when decided, is the restart
                st.shape[i] = -1
                st.config[i] = -1
                st.gpus[i] = ()
                st.restore_left[i] = 0.0
                continue
            st.restarts[i] += ph.failure_restarts
            if ph.failure_mode == "ghost":
                st.ghost[i] = True  # holds its GPUs, does nothing, until its allocation changes
                st.restore_left[i] = 0.0
                if self._credit is not None:
                    self._credit_left[i] = 0.0
                if self._uncounted is not None:
                    self._uncounted_left[i] = 0.0
            else:
                st.restore_left[i] = self.model.restore_delay[i]
                if self._credit is not None:
                    self._credit_left[i] = self._credit[1][i]
                if self._uncounted is not None:
                    self._uncounted_left[i] = self._uncounted[1][i]

    def _decide(
        self,
        st: JobsState,
        t: float,
        active: np.ndarray,
        policy: Policy,
        decision_ms: list[float],
        on_round: RoundObserver | None,
        seed: int,
        on_reasons: ReasonsObserver | None = None,
    ) -> None:
        """One engine step, enacted: the ledger takes each job's intent at once (restores start now); under
        learned goodput the jobs' measurements of this run (``seed``) are taken first."""
        if st.beliefs is not None:
            learning.observe(self.model, st, active, seed)
        plan = step(self.model, st, t, active, policy)
        decision_ms.append(plan.decision_ms)
        st.policy_state = plan.allocation.state
        st.solver_prices = plan.allocation.prices if self.warm_start else None
        if on_round is not None:
            on_round(plan.snapshot, plan.allocation, plan.placed)
        if on_reasons is not None:
            restore_left = np.where(plan.snapshot.restoring, st.restore_left[active], 0.0)
            on_reasons(
                round_reasons(
                    self.model,
                    st,
                    active,
                    policy,
                    plan.snapshot,
                    plan.allocation,
                    plan.placed,
                    restore_left_s=restore_left,
                )
            )
        ph = self.model.physics
        own_stop: dict[int, float] = {}
        if self._stop is not None:  # the GPUs the round's stopped and moved jobs release when they have exited
            for it in plan.intents:
                i = it.job
                if it.intent in (Intent.STOP, Intent.RESTART) and st.gpus[i]:
                    end = t + float(self._stop[i])
                    own_stop[i] = end
                    for g in st.gpus[i]:
                        self._free_at[g] = max(self._free_at.get(g, t), end)
        for it in plan.intents:
            i = it.job
            if it.intent is Intent.KEEP:
                continue
            if it.intent is Intent.STOP:
                if i in own_stop:  # its checkpoint and exit: restore time (T_ckpt), as the runtime counts a stop
                    st.t_ckpt[i] += own_stop[i] - t
                st.shape[i] = -1
                st.config[i] = -1
                st.gpus[i] = ()
                st.restore_left[i] = 0.0
                st.handover_left[i] = 0.0
                st.ckpt_tprog[i] = st.t_progress[i]
                continue
            st.ghost[i] = False
            st.max_run_gpus[i] = max(int(st.max_run_gpus[i]), int(self.model.shape_replicas[it.shape]))
            st.shape[i] = it.shape
            st.config[i] = it.config
            st.gpus[i] = it.gpus
            if it.intent is Intent.RELOCATE:
                continue  # same GPU type and GPUs per node: moved, not restarted
            restart = bool(st.started[i])
            delay = self.model.restore_delay[i] if restart else self._first_start[i]
            if restart:
                st.restarts[i] += 1
            st.started[i] = True
            wait = own = 0.0
            if self._stop is not None:  # launched once its GPUs (and, moved, the job itself) are free
                own = own_stop.get(i, t) - t  # its own checkpoint and exit: restart cost, not queueing
                wait = max([self._free_at.get(g, t) for g in it.gpus] + [t + own]) - t
            if self._credit is not None:
                self._credit_left[i] = self._credit[1 if restart else 0][i]
            if self._uncounted is not None:
                self._uncounted_left[i] = self._uncounted[1 if restart else 0][i]
            st.restore_left[i] = delay + wait
            st.handover_left[i] = wait - own
            st.ckpt_tprog[i] = st.t_progress[i]  # a move checkpoints first: the restart resumes from here
            if ph.queue_clock == "since-last-run":
                st.t_queue[i] = 0.0


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


class _Checkpoints:
    """Periodic checkpoints of a run (``checkpoint_policy`` other than "implicit"): each job's period between
    checkpoint starts, interval + its write time C, recomputed at every decision for the jobs that hold GPUs.
    "young-daly": interval √(2·C·MTBF), MTBF = 1 / the job's failure rate per second — λ's coin on its GPUs
    per round, the software rate, and per node it holds the node's rate as observed so far (its failures + 1
    over the time since the run began + 1 / the model's mean rate: the mean rate as a prior worth one failure),
    per rack the domain rate. What a scheduler can know: the rates it was told and the failures it saw. "advised":
    ``advised_checkpoint_interval`` of the same C and rate and the job's running time left at its current rate.
    "lossless": no write time and no work lost (the limit of every interval)."""

    def __init__(
        self,
        physics: PhysicsOptions,
        failures: Any,
        failure_rate: float,
        hw: HardwareModel,
        node_rate_s: float,
        t0: float,
    ) -> None:
        self.policy = physics.checkpoint_policy
        self.fixed = checkpoint_interval(physics.checkpoint_policy)
        #: "lossless": checkpoints that cost nothing and lose nothing (no write time, a failure costs its restore)
        self.lossless = self.policy == "lossless"
        self.failures, self.failure_rate, self.hw = failures, failure_rate, hw
        self.round_s = physics.round_s
        self.node_rate_s, self.t0 = node_rate_s, t0
        self.software_s = hw.software_rate / 1000.0 * hw.scale / 3600.0
        self.domain_s = hw.domain_rate / 1000.0 * hw.scale / 86_400.0

    def failure_rate_s(self, model: ClusterModel, st: JobsState, i: int, t: float) -> float:
        """Job ``i``'s failure rate per second where it is now."""
        gpus = int(model.shape_replicas[st.shape[i]])
        rate = self.software_s
        if self.failure_rate > 0:
            p = self.failures.probability(np.array([gpus], dtype=np.int64))
            rate += float(np.asarray(p).reshape(-1)[0]) / self.round_s
        nodes = {int(model.gpu_node[g]) for g in st.gpus[i]}
        if self.node_rate_s > 0:
            prior_s = 1.0 / self.node_rate_s
            rate += sum((float(st.node_failures[n]) + 1.0) / (t - self.t0 + prior_s) for n in nodes)
        if self.hw.domain_nodes > 0 and self.domain_s > 0:
            rate += len({n // self.hw.domain_nodes for n in nodes}) * self.domain_s
        return rate

    def exposure(self, model: ClusterModel, st: JobsState, t: float, active: np.ndarray) -> None:
        """Before a decision: each active job's failure overhead in each configuration (the snapshot's
        ``failure_overhead``): C/τ + ρ·(D + τ/2), ρ the configuration's failure rate (λ's coin on its GPUs per
        round, the software rate, its nodes × the cluster's mean node rate as observed, its racks' domain rate),
        τ the interval the job would checkpoint at there (the fixed one, or Young/Daly's √(2C/ρ)), D its
        restore; capped at 0.9. And each job's seconds at risk per failure (restore + half its current
        interval) for the placement. Under "none" (no interval) nothing is given; under "lossless" the overhead is
        ρ·D (no writes, nothing lost beyond the restore)."""
        if self.policy == "none":
            st.failure_overhead = None
            return
        gpus, nodes = model.config_gpus, model.config_nodes
        rho = np.full(len(gpus), self.software_s)
        if self.failure_rate > 0:
            rho = rho + np.asarray(self.failures.probability(gpus), dtype=np.float64) / self.round_s
        if self.node_rate_s > 0:
            observed = (st.node_failures + 1.0) / (t - self.t0 + 1.0 / self.node_rate_s)
            rho = rho + nodes * float(observed.mean())
        if self.hw.domain_nodes > 0 and self.domain_s > 0:
            rho = rho + np.ceil(nodes / self.hw.domain_nodes) * self.domain_s
        write = model.ckpt_write[active, None]
        restore = model.restore_delay[active, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.lossless:  # no writes, nothing lost but the restore
                over = rho[None, :] * restore
            else:
                if self.fixed is not None:
                    tau = np.full((len(write), len(gpus)), self.fixed)
                else:
                    tau = np.where(rho[None, :] > 0, np.sqrt(2.0 * write / rho[None, :]), np.inf)
                over = np.where(np.isfinite(tau), write / tau + rho[None, :] * (restore + tau / 2.0), 0.0)
        if st.failure_overhead is None or st.failure_overhead.shape != (len(st.done), len(gpus)):
            st.failure_overhead = np.zeros((len(st.done), len(gpus)))
        st.failure_overhead[active] = np.clip(np.nan_to_num(over, nan=0.0, posinf=0.9), 0.0, 0.9)
        interval = st.ckpt_period - model.ckpt_write
        st.work_at_risk = model.restore_delay + np.where(np.isfinite(interval), interval / 2.0, 0.0)

    def periods(self, model: ClusterModel, st: JobsState, t: float) -> None:
        """Each job's checkpoint period (interval + write time) where it runs now, after a decision. Checkpoints
        follow a timer: every period of running after the last one (``ckpt_tprog``, or the job's (re)start). A job
        whose period changes keeps the last checkpoint it wrote at the old one, and writes one at once where the
        new period has already passed since."""
        held = np.flatnonzero(st.shape >= 0)
        write = model.ckpt_write[held]
        if self.fixed is not None:
            st.ckpt_period[held] = self.fixed + write
            return
        if self.policy in ("none", "lossless"):
            st.ckpt_period[held] = np.inf
            return
        left = np.full(len(held), np.inf)
        if self.policy == "advised" and len(held):  # the running time each job has left at its current rate
            _, speed = model.progress_rates(st, held)
            with np.errstate(divide="ignore", invalid="ignore"):
                left = np.where(speed > 0, (model.total[held] - st.progress[held]) / speed, np.inf)
        for i, c, remaining in zip(held.tolist(), write.tolist(), left.tolist(), strict=True):
            rate = self.failure_rate_s(model, st, i, t)
            if self.policy == "advised":
                interval = advised_checkpoint_interval(c, rate, remaining)
            else:
                interval = math.sqrt(2.0 * c / rate) if rate > 0 else math.inf
            old, new = float(st.ckpt_period[i]), interval + c
            if new != old:
                last, now = float(st.ckpt_tprog[i]), float(st.t_progress[i])
                if math.isfinite(old) and old > 0:  # the last checkpoint it wrote at the old period
                    last += math.floor((now - last) / old) * old
                if now - last >= new:  # already due at the new one: it writes it now
                    last = now
                st.ckpt_tprog[i] = last
            st.ckpt_period[i] = new
