"""Pollux (reference §4): NSGA-II over replicas per (job, node), maximising a power mean of speedups.

Decision variable A (jobs × nodes): replicas of job j on node k. Objective (minimised):

    F1 = −PM_p(ŝ),  ŝ_j = speedup_j(N_j, R_j) · d_j·(#nodes) · (f_j if row A_j ≠ current row, else 1),
    PM_p(x) = ((1/J) Σ (x_j + 0.001)^p)^(1/p)   (p = 0: geometric mean with x floored at 0.001),
    f_j = max(T_j − K_j·δ, 0)/(T_j + δ)          (T: age, K: restarts, δ = ``restart_delta_s``).

speedup_j = goodput_j(N, R) / goodput_j(fair share) (reference §3.2) with R_f = ⌈G/J⌉ GPUs (G = GPUs in the
cluster). Departure from Pollux's code: its quirk of evaluating the fair share on one node is not copied;
the fair share is R_f GPUs on N_f = ⌈R_f / GPUs per node⌉ nodes of the job's best-goodput type (the type
whose goodput at that shape is largest). If that shape has no positive goodput (R_f beyond the job's
batch limits or the cluster), the base falls back to the job's best goodput on at most R_f GPUs, then to
its best goodput anywhere. d_j·(#nodes) = #nodes/G (GPU-only replicas), common to all jobs.

Jobs are ordered least attained GPU-service first, then oldest, then by index (§4.1); the repair gives
capacity to earlier jobs first. Repair (§4.4), vectorised over the population, in this order:

1. pinned jobs: none (every job in these simulators is preemptible);
2. one distributed job per node, read as Pollux's code does: a job spanning > 1 node is distributed; on
   each node, counting distributed jobs with replicas there in job order, every job from the second
   distributed one onward (distributed or not) loses its replicas on that node. Jobs between the first
   and the second distributed job keep theirs; a node with one distributed job is untouched;
3. per-job max replicas = min(max_gpus, 64, largest R with positive goodput): nodes visited in a random
   order, the running total truncated;
4. at most 16 nodes per job (the first 16 used nodes in that same random order);
5. node capacity: jobs in order take GPUs until the node is full;
6. one GPU type per job (§4.7): cut back to the type holding most of its GPUs (ties: the type on which
   the job's best goodput is higher);
7. jobs below min_gpus, and jobs whose (type, N, R) has no positive goodput, are zeroed.

Steps 3–7 only remove replicas, so no step undoes an earlier one, and every repaired individual passes
the simulator's validation. Mutation (§4.5): per job with probability 0.1 reset the row to the current
allocation; per job with probability 0.1 zero each entry with probability 0.1; grow: an entry (j, k) on a
node with free GPUs is re-drawn uniformly in [A_jk, A_jk + free_k] with probability p1 + p2 − p1·p2, p1 =
1/(#nodes with free GPUs), p2 = 1/(#nodes with free GPUs where j already runs) on those nodes, else 0.
Crossover: single-point over the job dimension (rows before a random cut swapped). Initial population:
the previous round's final population re-indexed by job name (new jobs get zero rows), else the current
allocation and mutated copies of it.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np

from oak.errors import OakInputError
from oak.model.snapshot import Allocation, FloatArray, IntArray, RoundSnapshot
from oak.policies.base import PolicyBase
from oak.policies.nsga import GeneticOperators, GeneticState, check_ga_params, job_order, nsga2, policy_rng
from oak.solve.assignment import snap_values

#: Pollux's limits (reference §3.5, §4.4); the simulator enforces the same.
MAX_NODES_PER_JOB = 16
MAX_REPLICAS_PER_JOB = 64
#: Floor added to ŝ before the power mean (reference §4.2).
SPEEDUP_FLOOR = 0.001
#: Mutation probabilities (reference §4.5).
P_RESET = 0.1
P_ZERO_JOB = 0.1
P_ZERO_ENTRY = 0.1

STATE_KIND = "pollux-replicas"


def pollux_restart_factor(age_s: FloatArray, restarts: IntArray | FloatArray, delta_s: float) -> FloatArray:
    """f = max(T − K·δ, 0)/(T + δ) (reference §4.3); 1 where T + δ = 0. No exemption for young jobs."""
    t = np.asarray(age_s, dtype=np.float64)
    k = np.asarray(restarts, dtype=np.float64)
    denom = t + delta_s
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, np.maximum(t - k * delta_s, 0.0) / denom, 1.0)


def power_mean(x: FloatArray, p: float, axis: int = -1) -> FloatArray:
    """((1/J) Σ (x + 0.001)^p)^(1/p); p = 0: geometric mean of max(x, 0.001) (reference §4.2)."""
    x = np.asarray(x, dtype=np.float64)
    if p == 0:
        return np.asarray(np.exp(np.mean(np.log(np.maximum(x, SPEEDUP_FLOOR)), axis=axis)))
    return np.asarray(np.power(np.mean(np.power(x + SPEEDUP_FLOOR, p), axis=axis), 1.0 / p))


@dataclass(frozen=True, eq=False)
class PolluxProblem:
    """One round's arrays, jobs in Pollux's job order (``order[i]`` = snapshot index of position i).

    speedup: (J, T, N+1, R+1) fair-share speedup × #nodes/G, 0 where the shape has no positive goodput.
    """

    order: IntArray
    current: IntArray
    node_gpus: IntArray
    node_type: IntArray
    min_gpus: IntArray
    max_replicas: IntArray
    type_rank: IntArray
    speedup: FloatArray
    restart_factor: FloatArray
    p: float

    @classmethod
    def from_snapshot(cls, snap: RoundSnapshot, p: float, restart_delta_s: float) -> PolluxProblem:
        if snap.node_goodput is None:
            raise OakInputError("pollux: the snapshot has no node_goodput (the policy sets needs_node_goodput)")
        order = job_order(snap)
        ng = np.asarray(snap.node_goodput, dtype=np.float64)[order]
        r_dim = ng.shape[3]
        node_gpus = np.asarray(snap.node_gpus, dtype=np.int64)
        node_type = np.asarray(snap.node_type, dtype=np.int64)
        # on the solvers' grid (oak.solve.assignment): rankings and fitness comparisons do not move on last-bit noise
        ng = np.where(ng > 0, ng, 0.0)
        ng = snap_values(ng, ng > 0)
        ng[:, :, 0, :] = 0.0
        ng[:, :, :, 0] = 0.0
        total = int(node_gpus.sum())
        base = _fair_share_goodput(ng, node_gpus, node_type, total)
        scale = len(node_gpus) / max(total, 1)
        speedup = ng / base[:, None, None, None] * scale
        positive_r = np.any(ng > 0, axis=(1, 2))  # (J, R+1)
        largest_r = np.where(positive_r.any(axis=1), r_dim - 1 - np.argmax(positive_r[:, ::-1], axis=1), 0)
        max_replicas = np.minimum(np.minimum(np.asarray(snap.max_gpus)[order], MAX_REPLICAS_PER_JOB), largest_r)
        best_per_type = ng.max(axis=(2, 3))  # (J, T)
        type_rank = np.argsort(np.argsort(best_per_type, axis=1, kind="stable"), axis=1, kind="stable")
        return cls(
            order=order,
            current=np.asarray(snap.current_replicas, dtype=np.int64)[order],
            node_gpus=node_gpus,
            node_type=node_type,
            min_gpus=np.asarray(snap.min_gpus, dtype=np.int64)[order],
            max_replicas=max_replicas.astype(np.int64),
            type_rank=type_rank.astype(np.int64),
            speedup=speedup,
            restart_factor=_snapped(pollux_restart_factor(snap.age_s, snap.restarts, restart_delta_s)[order]),
            p=float(p),
        )

    @property
    def num_jobs(self) -> int:
        return len(self.order)

    # ------------------------------------------------------------ evaluation
    def job_speedups(self, x: IntArray) -> FloatArray:
        """(P, J) scaled speedup of each job's (type, N, R) in each individual (no restart factor)."""
        x = np.asarray(x)
        j, t_count, n_dim, r_dim = self.speedup.shape
        used = x > 0
        n = used.sum(axis=2)
        r = x.sum(axis=2)
        # flat index of (job, type, N, R) into the speedup table; shapes beyond it have no goodput
        idx = np.minimum(n, n_dim - 1) * r_dim + np.minimum(r, r_dim - 1)
        if t_count > 1:
            idx += self.node_type[np.argmax(used, axis=2)] * (n_dim * r_dim)
        idx += (np.arange(j) * (t_count * n_dim * r_dim))[None, :]
        sp = np.take(self.speedup, idx)
        return np.where((n < n_dim) & (r < r_dim), sp, 0.0)

    def scaled_speedups(self, x: IntArray) -> FloatArray:
        """(P, J) ŝ: speedup × restart factor on rows that differ from the current allocation."""
        x = np.asarray(x)
        changed = np.any(x != self.current[None], axis=2)
        return self.job_speedups(x) * np.where(changed, self.restart_factor[None, :], 1.0)

    def evaluate(self, x: IntArray) -> FloatArray:
        """F1 = −PM_p(ŝ) per individual (minimised)."""
        return -power_mean(self.scaled_speedups(x), self.p, axis=1)

    # ------------------------------------------------------------ repair
    def repair(self, x: IntArray, rng: np.random.Generator) -> IntArray:
        """Reference §4.4 (see the module docstring); returns a new (P, J, K) array."""
        x = np.clip(np.asarray(x, dtype=np.int64), 0, self.node_gpus)
        j, k = x.shape[1:]
        if j == 0:
            return x
        # (2) at most one distributed job per node; from the second one on, later jobs lose that node.
        if k > 1:
            distributed = np.count_nonzero(x, axis=2) > 1
            on = (x > 0) & distributed[:, :, None]
            x[np.cumsum(on, axis=1) > 1] = 0
        # (3) max replicas and (4) ≤ 16 nodes, visiting nodes in a random order (only rows over a limit
        # need the visit: truncating a row within both limits changes nothing, whatever the order).
        over = (x.sum(axis=2) > self.max_replicas[None, :]) | (np.count_nonzero(x, axis=2) > MAX_NODES_PER_JOB)
        if over.any():
            rows = x[over]  # (M, K)
            limit = np.broadcast_to(self.max_replicas[None, :], over.shape)[over]
            perm = np.argsort(rng.random(rows.shape), axis=1)
            xs = np.take_along_axis(rows, perm, axis=1)
            xs = np.diff(np.minimum(np.cumsum(xs, axis=1), limit[:, None]), axis=1, prepend=0)
            xs[np.cumsum(xs > 0, axis=1) > MAX_NODES_PER_JOB] = 0
            np.put_along_axis(rows, perm, xs, axis=1)
            x[over] = rows
        # (5) node capacity, jobs in order.
        x = np.diff(np.minimum(np.cumsum(x, axis=1), self.node_gpus), axis=1, prepend=0)
        # (6) one GPU type per job: keep the type holding most of its GPUs.
        n_types = self.type_rank.shape[1]
        if n_types > 1:
            onehot = (self.node_type[:, None] == np.arange(n_types)[None, :]).astype(np.int64)
            per_type = x @ onehot  # (P, J, T)
            keep = np.argmax(per_type * n_types + self.type_rank[None], axis=2)
            x = np.where(self.node_type[None, None, :] == keep[:, :, None], x, 0)
        # (7) min GPUs and positive goodput.
        bad = (x.sum(axis=2) < self.min_gpus[None, :]) | (self.job_speedups(x) <= 0)
        x[bad] = 0
        return x

    # ------------------------------------------------------------ variation
    def mutate(self, x: IntArray, rng: np.random.Generator) -> IntArray:
        """Reset / zero / grow mutations of reference §4.5, applied to every individual."""
        x = np.array(x, dtype=np.int64)
        pop, j, k = x.shape
        u = rng.random((5, pop, j, k))
        reset = u[0, :, :, :1] < P_RESET
        x = np.where(reset, self.current[None], x)
        x[(u[1, :, :, :1] < P_ZERO_JOB) & (u[2] < P_ZERO_ENTRY)] = 0
        free = np.maximum(self.node_gpus[None, :] - x.sum(axis=1), 0)  # (P, K)
        room = free > 0
        n_room = room.sum(axis=1)
        p1 = np.where(n_room > 0, 1.0 / np.maximum(n_room, 1), 0.0)[:, None, None]
        runs = (x > 0) & room[:, None, :]
        n_runs = runs.sum(axis=2, keepdims=True)
        p2 = np.where(runs, 1.0 / np.maximum(n_runs, 1), 0.0)
        prob = np.where(room[:, None, :], p1 + p2 - p1 * p2, 0.0)
        grow = u[3] < prob
        step = (u[4] * (free[:, None, :] + 1)).astype(np.int64)
        return np.where(grow, x + step, x)

    def crossover(self, a: IntArray, b: IntArray, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """Single-point crossover over jobs: rows before a random cut come from the other parent."""
        m, j = a.shape[:2]
        cut = rng.integers(0, max(j, 1), size=m)
        swap = (np.arange(j)[None, :] < cut[:, None])[:, :, None]
        return np.where(swap, b, a), np.where(swap, a, b)

    def operators(self) -> GeneticOperators:
        return GeneticOperators(
            evaluate=self.evaluate, crossover=self.crossover, mutate=self.mutate, repair=self.repair
        )


def _snapped(x: FloatArray) -> FloatArray:
    """``x`` on the solvers' value grid (``oak.solve.assignment.snap_values``)."""
    return snap_values(x, np.isfinite(x))


def _fair_share_goodput(ng: FloatArray, node_gpus: IntArray, node_type: IntArray, total: int) -> FloatArray:
    """(J,) goodput at the fair share ⌈G/J⌉ GPUs on the fewest nodes of the job's best type (see module doc)."""
    j, t_count, n_dim, r_dim = ng.shape
    r_f = math.ceil(total / max(j, 1))
    base = np.zeros(j)
    if r_f < r_dim:
        for t in range(t_count):
            gpus_t = node_gpus[node_type == t]
            if len(gpus_t) == 0 or int(gpus_t.max()) == 0:  # no node of the type (or all under repair)
                continue
            n_f = math.ceil(r_f / int(gpus_t.max()))
            if n_f < n_dim:
                base = np.maximum(base, ng[:, t, n_f, r_f])
    upto = ng[:, :, :, : min(r_f, r_dim - 1) + 1].max(axis=(1, 2, 3))
    anywhere = ng.max(axis=(1, 2, 3))
    base = np.where(base > 0, base, upto)
    base = np.where(base > 0, base, anywhere)
    return np.where(base > 0, base, 1.0)


@dataclass(frozen=True)
class PolluxPolicy(PolicyBase):
    """Pollux (reference §4) at its published defaults: population 100, 100 generations, p = −1, δ = 30 s.

    ``engine``: "numba" (default: the same loop and operators compiled, ``oak.policies.pollux_kernel``,
    ~10× faster), "numpy" (array-native NSGA-II) or "pymoo" (pymoo's NSGA2, slower; see ``oak.policies.nsga``).
    Randomness derives from ``seed`` and the snapshot time only.
    """

    population: int = 100
    generations: int = 100
    p: float = -1.0
    restart_delta_s: float = 30.0
    seed: int = 0
    engine: str = "numba"
    name: str = "pollux"

    @property
    def needs_node_goodput(self) -> bool:
        return True  # scores replicas per (job, node) shape

    def __post_init__(self) -> None:
        check_ga_params(self.name, self.population, self.generations, self.seed, self.engine)
        if isinstance(self.p, bool) or not isinstance(self.p, numbers.Real) or not math.isfinite(self.p):
            raise OakInputError(
                f"{self.name}: p={self.p!r}; expected a finite number (−1 = harmonic mean, 0 = geometric)"
            )
        if (
            isinstance(self.restart_delta_s, bool)
            or not isinstance(self.restart_delta_s, numbers.Real)
            or not math.isfinite(self.restart_delta_s)
            or self.restart_delta_s < 0
        ):
            raise OakInputError(
                f"{self.name}: restart_delta_s={self.restart_delta_s!r}; expected a finite number >= 0 (s)"
            )

    def problem(self, snap: RoundSnapshot) -> PolluxProblem:
        return PolluxProblem.from_snapshot(snap, self.p, self.restart_delta_s)

    def initial_population(self, snap: RoundSnapshot, prob: PolluxProblem, rng: np.random.Generator) -> IntArray:
        """Previous final population re-indexed by job name, else the current allocation + mutated copies."""
        names = tuple(snap.job_names[i] for i in prob.order)
        k = len(prob.node_gpus)
        prev = None
        if isinstance(snap.policy_state, GeneticState):
            prev = snap.policy_state.reindex(STATE_KIND, names, (k,), 0)
        cur = np.broadcast_to(prob.current, (1, *prob.current.shape))
        if prev is None:
            prev = cur
            fill = prob.mutate(np.repeat(cur, self.population - 1, axis=0), rng)
        else:
            prev = prev[: self.population]
            fill = prob.mutate(np.repeat(cur, self.population - len(prev), axis=0), rng)
        return np.concatenate([prev, fill]).astype(np.int64)

    def decide(self, snap: RoundSnapshot) -> Allocation:
        start = time.perf_counter()
        j, k = snap.num_jobs, len(snap.node_gpus)
        if j == 0:
            return Allocation(
                config=np.zeros(0, np.int64), replicas=np.zeros((0, k), np.int64), objective=0.0, method="nsga2"
            )
        rng = policy_rng(self.seed, snap)
        prob = self.problem(snap)
        init = self.initial_population(snap, prob, rng)
        if self.engine == "numba":
            from oak.policies import pollux_kernel

            pop, obj, evaluations = pollux_kernel.run_round(init, prob, self.generations, rng)
        else:
            res = nsga2(
                init,
                prob.operators(),
                population=self.population,
                generations=self.generations,
                rng=rng,
                engine=self.engine,
            )
            pop, obj, evaluations = res.population, res.objective, res.evaluations
        replicas = np.zeros((j, k), dtype=np.int64)
        replicas[prob.order] = pop[0]
        names = tuple(snap.job_names[i] for i in prob.order)
        final = pop.copy()
        final.setflags(write=False)
        return Allocation(
            config=np.full(j, -1, dtype=np.int64),
            replicas=replicas,
            objective=float(-obj[0]),
            method="nsga2",
            info={"solve_ms": (time.perf_counter() - start) * 1e3, "evaluations": float(evaluations)},
            state=GeneticState(kind=STATE_KIND, job_names=names, population=final),
        )
