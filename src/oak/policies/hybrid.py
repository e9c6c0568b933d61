"""Hybrid OAK (paper §V-E): OAK's own objective optimised by NSGA-II instead of the exact MILP.

    maximise  Σ_i U[i, x_i] + μ_na · #{i : x_i = −1},   x_i ∈ {−1, 0, …, C−1} (Sia's configurations)

U is ``oak.scoring.utility_matrix(snap, params)`` — the very function ``oak`` scores with (one scoring
function, two optimisers, paper §III-D), so its optimum equals the MILP's and every objective it reports
is attainable by the MILP. Budget: population 20 × 20 generations = 400 evaluations per round.

Repair (never an infeasible allocation): configurations out of range or not ``snap.valid`` become −1;
then, per GPU type, jobs in order (least attained GPU-service, then oldest, then index) keep their
configuration while capacity lasts, else fall back to the largest valid configuration of the same type
that still fits (ties: higher U), else −1. Mutation: each gene with probability max(1/J, 0.1) is redrawn
uniformly from the job's valid configurations and −1. Crossover: uniform over jobs (a departure from
Pollux's single cut: with ≤ 12 genes a single cut rarely separates good partial assignments).
Initial population: the current allocation (repaired), the previous round's final population re-indexed
by job name (new jobs −1) filling up to three quarters, and random individuals (each gene uniform over
its options) for the rest.

Engines: "numba" (default) runs the whole NSGA-II of a round in one compiled kernel
(``oak.policies.hybrid_kernel``; numba is imported only then) with the same operators, draws and duplicate
elimination as "numpy" (``oak.policies.nsga.nsga2`` with ``eliminate_duplicates=True``), hence the same
result: ≈ 0.5–1 ms per ``decide`` on the medium / congestion rounds instead of ≈ 5–40 ms (first call:
compilation, ≈ 20 s once, then ≈ 0.5 s per process from numba's on-disk cache). "pymoo" is the reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from oak.model.snapshot import Allocation, BoolArray, FloatArray, IntArray, RoundSnapshot
from oak.policies.base import PolicyBase
from oak.policies.nsga import (
    CROSSOVER_PROB,
    MATING_TRIES,
    GeneticOperators,
    GeneticState,
    NsgaResult,
    _hash_weights,
    check_ga_params,
    job_order,
    nsga2,
    policy_rng,
)
from oak.scoring import UtilityParams, utility_matrix, utility_params
from oak.solve.assignment import snap_values

STATE_KIND = "hybrid-oak-config"
#: Share of mutations that step to a neighbouring size of the same GPU type instead of redrawing.
P_STEP = 0.3


@dataclass(frozen=True, eq=False)
class HybridProblem:
    """One round's arrays; individuals are (P, J) configuration indices in snapshot job order.

    value: (J, C+1) U with μ_na in the last column (x = −1). best_fit: (J, T, F + 1) the largest valid
    configuration of type t with at most f GPUs, or −1, F the largest configuration's GPUs or the largest
    capacity if less (look up f > F at F). options / n_options: (J, C+1) each
    job's valid configurations followed by −1, padded, and how many there are.
    """

    order: IntArray
    valid: BoolArray
    gpus: IntArray
    config_type: IntArray
    capacity: IntArray
    value: FloatArray
    best_fit: IntArray
    options: IntArray
    n_options: IntArray
    up: IntArray
    down: IntArray

    @classmethod
    def from_snapshot(cls, snap: RoundSnapshot, utility: FloatArray, mu_na: float) -> HybridProblem:
        j, c = snap.num_jobs, snap.num_configs
        valid = np.asarray(snap.valid, dtype=bool)
        gpus = np.asarray(snap.config_gpus, dtype=np.int64)
        ctype = np.asarray(snap.config_type, dtype=np.int64)
        capacity = np.asarray(snap.capacity, dtype=np.int64)
        # on the solvers' grid (oak.solve.assignment): orderings and fitness comparisons do not move on last-bit noise
        u = snap_values(np.where(valid, np.asarray(utility, dtype=np.float64), 0.0), valid)
        value = np.concatenate([u, np.full((j, 1), float(mu_na))], axis=1)
        rows = np.arange(j)[:, None]
        gpus_2d, ctype_2d = np.repeat(gpus[None, :], j, axis=0), np.repeat(ctype[None, :], j, axis=0)
        # scan order of each job's configurations: (GPUs, U, index) ascending; rank = position in it
        scan = np.lexsort((u, gpus_2d), axis=-1)
        rank = np.empty_like(scan)
        rank[rows, scan] = np.arange(c)[None, :]
        # best_fit[i, t, f]: the last valid configuration of type t with at most f GPUs in scan order, for f up
        # to the largest configuration that fits a type (beyond it nothing changes: look-ups clamp f to it, so a
        # 2,048-GPU cluster's table is not 769 wide)
        n_types = len(capacity)
        width = int(min(capacity.max(initial=0), gpus.max(initial=0))) + 1
        top = np.full((j, n_types, width), -1, dtype=np.int64)
        ji, ci = np.nonzero(valid & (gpus < width)[None, :])
        np.maximum.at(top, (ji, ctype[ci], gpus[ci]), rank[ji, ci])
        top = np.maximum.accumulate(top, axis=2)
        best_fit = np.where(top >= 0, scan[rows[:, :, None], np.maximum(top, 0)], -1).astype(np.int64)
        # options: each job's valid configurations (ascending) then −1, padded with −1
        ji, ci = np.nonzero(valid)
        options = np.full((j, c + 1), -1, dtype=np.int64)
        options[ji, (np.cumsum(valid, axis=1) - 1)[ji, ci]] = ci
        n_options = valid.sum(axis=1).astype(np.int64) + 1
        # up / down: the next valid configuration of the same type in scan order (the largest: itself) /
        # the previous one (the smallest: −1); invalid configurations and column C (x = −1): −1
        seq = np.lexsort((u, gpus_2d, ctype_2d, ~valid), axis=-1)
        sv, st = valid[rows, seq], ctype[seq]
        link = sv[:, :-1] & sv[:, 1:] & (st[:, :-1] == st[:, 1:])
        up_s, down_s = seq.copy(), np.full_like(seq, -1)
        up_s[:, :-1] = np.where(link, seq[:, 1:], seq[:, :-1])
        down_s[:, 1:] = np.where(link, seq[:, :-1], -1)
        up = np.full((j, c + 1), -1, dtype=np.int64)
        down = np.full((j, c + 1), -1, dtype=np.int64)
        up[rows, seq] = np.where(sv, up_s, -1)
        down[rows, seq] = np.where(sv, down_s, -1)
        return cls(
            order=job_order(snap),
            valid=valid,
            gpus=gpus,
            config_type=ctype,
            capacity=capacity,
            value=value,
            best_fit=best_fit,
            options=options,
            n_options=n_options,
            up=up,
            down=down,
        )

    @property
    def num_jobs(self) -> int:
        return len(self.order)

    def objective(self, x: IntArray) -> FloatArray:
        """Σ_i U[i, x_i] + μ_na·#unallocated per individual."""
        x = np.asarray(x)
        col = np.where(x < 0, self.value.shape[1] - 1, x)
        return np.asarray(self.value[np.arange(self.num_jobs)[None, :], col].sum(axis=1))

    def evaluate(self, x: IntArray) -> FloatArray:
        return -self.objective(x)

    def repair(self, x: IntArray, rng: np.random.Generator) -> IntArray:
        """Invalid → −1; per GPU type, jobs in order keep / shrink within the type / drop (module doc)."""
        x = np.array(x, dtype=np.int64)
        pop, j = x.shape
        n_cfg = self.valid.shape[1]
        x[(x < 0) | (x >= n_cfg)] = -1
        ok = (x >= 0) & self.valid[np.arange(j)[None, :], np.maximum(x, 0)]
        x[~ok] = -1
        used = np.zeros((pop, len(self.capacity)), dtype=np.int64)
        rows = np.arange(pop)
        for i in self.order:
            c = x[:, i]
            has = c >= 0
            cc = np.maximum(c, 0)
            t = self.config_type[cc]
            left = self.capacity[t] - used[rows, t]
            fit = self.best_fit[i, t, np.minimum(np.maximum(left, 0), self.best_fit.shape[2] - 1)]
            new = np.where(self.gpus[cc] <= left, c, fit)
            new = np.where(has, new, -1)
            x[:, i] = new
            nn = np.maximum(new, 0)
            used[rows, self.config_type[nn]] += np.where(new >= 0, self.gpus[nn], 0)
        return x

    def random_individuals(self, n: int, rng: np.random.Generator) -> IntArray:
        """Each gene uniform over the job's valid configurations and −1."""
        pick = (rng.random((n, self.num_jobs)) * self.n_options[None, :]).astype(np.int64)
        return np.asarray(self.options[np.arange(self.num_jobs)[None, :], pick])

    def mutate(self, x: IntArray, rng: np.random.Generator) -> IntArray:
        """Each gene with probability max(1/J, 0.1): a step to the next larger or smaller valid configuration
        of its type (probability P_STEP; a step down from the smallest is −1), else a uniform redraw."""
        x = np.asarray(x)
        rate = max(1.0 / max(self.num_jobs, 1), 0.1)
        u = rng.random((3, *x.shape))
        jobs = np.arange(self.num_jobs)[None, :]
        col = np.where(x < 0, self.valid.shape[1], x)
        step = np.where(u[2] < 0.5, self.up[jobs, col], self.down[jobs, col])
        redraw = self.random_individuals(len(x), rng)
        new = np.where((u[1] < P_STEP) & (x >= 0), step, redraw)
        return np.where(u[0] < rate, new, x)

    def crossover(self, a: IntArray, b: IntArray, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """Uniform crossover: each job's gene from either parent with probability 1/2."""
        swap = rng.random(a.shape) < 0.5
        return np.where(swap, b, a), np.where(swap, a, b)

    def operators(self) -> GeneticOperators:
        return GeneticOperators(
            evaluate=self.evaluate, crossover=self.crossover, mutate=self.mutate, repair=self.repair
        )


@dataclass(frozen=True)
class HybridOakPolicy(PolicyBase):
    """OAK's composite utility optimised by NSGA-II (population 20 × 20 generations by default).

    ``engine``: "numba" (default: one compiled kernel, same result as "numpy"; module doc), "numpy" or
    "pymoo" (see ``oak.policies.nsga``).
    """

    params: UtilityParams = UtilityParams()
    population: int = 20
    generations: int = 20
    seed: int = 0
    engine: str = "numba"
    name: str = "hybrid-oak"

    def __post_init__(self) -> None:
        check_ga_params(self.name, self.population, self.generations, self.seed, self.engine)

    @classmethod
    def with_params(
        cls,
        name: str = "hybrid-oak",
        population: int = 20,
        generations: int = 20,
        seed: int = 0,
        engine: str = "numba",
        **utility_kwargs: Any,
    ) -> HybridOakPolicy:
        """Like ``OakPolicy.with_params``: utility keywords p, alpha, k_max, mu_na, age_key, restart_factor."""
        return cls(
            params=utility_params("Hybrid OAK", **utility_kwargs),
            population=population,
            generations=generations,
            seed=seed,
            engine=engine,
            name=name,
        )

    def problem(self, snap: RoundSnapshot) -> HybridProblem:
        return HybridProblem.from_snapshot(snap, utility_matrix(snap, self.params), self.params.mu_na)

    def initial_population(self, snap: RoundSnapshot, prob: HybridProblem, rng: np.random.Generator) -> IntArray:
        """Current allocation, then the previous population (≤ 3/4 of the slots), then random individuals."""
        parts = [np.asarray(snap.current, dtype=np.int64)[None, :]]
        room = self.population - 1
        if isinstance(snap.policy_state, GeneticState) and room > 0:
            prev = snap.policy_state.reindex(STATE_KIND, snap.job_names, (), -1)
            if prev is not None:
                prev = prev[: min(room, max(1, (3 * self.population) // 4))]
                parts.append(prev)
                room -= len(prev)
        if room > 0:
            parts.append(prob.random_individuals(room, rng))
        return np.concatenate(parts)

    def decide(self, snap: RoundSnapshot) -> Allocation:
        start = time.perf_counter()
        j = snap.num_jobs
        if j == 0:
            return Allocation(config=np.zeros(0, np.int64), objective=0.0, method="nsga2")
        rng = policy_rng(self.seed, snap)
        utility = utility_matrix(snap, self.params)
        prob = HybridProblem.from_snapshot(snap, utility, self.params.mu_na)
        init = self.initial_population(snap, prob, rng)
        if self.engine == "numba":
            res = solve_numba(prob, init, self.population, self.generations, rng)
        else:
            res = nsga2(
                init,
                prob.operators(),
                population=self.population,
                generations=self.generations,
                rng=rng,
                engine=self.engine,
                eliminate_duplicates=True,
            )
        final = res.population.copy()
        final.setflags(write=False)
        best = res.population[0].copy()
        # the search compares values on the solvers' grid; the allocation's worth is reported in the values given
        rows = np.arange(j)
        given = np.where(best >= 0, np.asarray(utility, dtype=np.float64)[rows, np.maximum(best, 0)], self.params.mu_na)
        return Allocation(
            config=best,
            objective=float(given.sum()),
            method="nsga2",
            info={"solve_ms": (time.perf_counter() - start) * 1e3, "evaluations": float(res.evaluations)},
            state=GeneticState(kind=STATE_KIND, job_names=tuple(snap.job_names), population=final),
        )


def solve_numba(
    prob: HybridProblem, initial: IntArray, population: int, generations: int, rng: np.random.Generator
) -> NsgaResult:
    """``nsga2(initial, prob.operators(), ..., eliminate_duplicates=True)`` run by the numba kernel."""
    from oak.policies.hybrid_kernel import hybrid_nsga2

    initial = np.asarray(initial, dtype=np.int64)
    if len(initial) != population:
        raise ValueError(f"initial population has {len(initial)} individuals; expected {population}")
    x, f, evaluations = hybrid_nsga2(
        *kernel_arrays(prob, initial),
        np.array(_hash_weights(prob.num_jobs)),
        population,
        generations,
        MATING_TRIES,
        CROSSOVER_PROB,
        P_STEP,
        rng,
    )
    return NsgaResult(population=x, objective=f, evaluations=int(evaluations))


#: initial, order, valid, gpus, config_type, capacity, value, best_fit, options, n_options, up, down.
KernelArrays = tuple[Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any]


def kernel_arrays(prob: HybridProblem, initial: IntArray) -> KernelArrays:
    """initial and the problem's arrays as the kernel takes them: C-contiguous and writable, so that one
    compiled signature serves all rounds (numba compiles read-only arrays separately)."""

    def arr(a: Any, dtype: Any) -> Any:
        a = np.asarray(a)
        ok = a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        return a if ok else np.array(a, dtype=dtype, order="C")

    i64 = np.int64
    return (
        arr(initial, i64),
        arr(prob.order, i64),
        arr(prob.valid, np.bool_),
        arr(prob.gpus, i64),
        arr(prob.config_type, i64),
        arr(prob.capacity, i64),
        arr(prob.value, np.float64),
        arr(prob.best_fit, i64),
        arr(prob.options, i64),
        arr(prob.n_options, i64),
        arr(prob.up, i64),
        arr(prob.down, i64),
    )
