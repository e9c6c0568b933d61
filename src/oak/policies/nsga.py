"""Shared NSGA-II plumbing of the genetic policies (Pollux, Hybrid OAK).

Both policies minimise one objective (Pollux's F2 is disabled in the simulators; Hybrid OAK has one), so
NSGA-II's non-dominated rank is the rank of F and its crowding distance only breaks ties. Three engines run
the same operators:

* ``numpy``: an array-native NSGA-II loop — binary tournaments on random permutations (lower F
  wins, ties at random), crossover with probability 0.9, mutation of every offspring, repair, then
  elitist (μ + λ) survival by (duplicate last, F, random). The population is one integer array, so a
  generation costs a few dozen vectorised numpy calls (≈ 1 ms for Pollux at 100 individuals).
* ``pymoo``: ``pymoo.algorithms.moo.nsga2.NSGA2`` driving the same Sampling/Crossover/Mutation/Repair
  wrapped as pymoo operators. pymoo keeps one Python object per individual; its bookkeeping alone costs
  ≈ 11 ms per generation at population 100 on the 2-core development machine (1.15 s for a 100 × 100 run
  with operators that do nothing, mostly binary_tournament, Population.get/set and RankAndCrowding), so
  it is the reference implementation, not the default.
* ``numba`` (the policies' default): each policy's own compiled copy of this loop and its operators (``pollux_kernel``,
  ``hybrid_kernel``), which the policy runs itself; :func:`nsga2` takes only the two engines above.

``eliminate_duplicates`` (as pymoo's option; Pollux's pymoo 0.4 ran with it on): offspring equal to one
another or to the population are replaced by further matings. Hybrid OAK uses it (its space is small and a
20 × 20 run is cheap); Pollux does not (in its converged populations it multiplies the matings per
generation by 3–8 and the round time with them), and ranks duplicates last at survival instead.

``generations`` counts the initial population as generation 1, as pymoo's ``("n_gen", G)`` does, so a run
makes at most population × generations evaluations (Pollux: 100 × 100 = 10,000; Hybrid OAK: 20 × 20 = 400).

Randomness comes only from a ``numpy.random.Generator`` derived from the policy's seed and the snapshot
(:func:`policy_rng`), never from global state.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError
from oak.model.snapshot import FloatArray, IntArray, RoundSnapshot

ENGINES = ("numba", "numpy", "pymoo")
CROSSOVER_PROB = 0.9
#: Matings per generation at most while duplicate offspring are replaced (pymoo allows 100).
MATING_TRIES = 10

Evaluate = Callable[[IntArray], FloatArray]
Crossover = Callable[[IntArray, IntArray, np.random.Generator], tuple[IntArray, IntArray]]
Mutate = Callable[[IntArray, np.random.Generator], IntArray]
Repair = Callable[[IntArray, np.random.Generator], IntArray]


@dataclass(frozen=True)
class GeneticOperators:
    """The problem-specific parts of a genetic run; individuals are integer arrays (P, *shape).

    evaluate: objective to minimise, (P,). crossover: two parent arrays (M, *shape) → two children arrays.
    mutate / repair: (P, *shape) → (P, *shape), never modifying their input in place.
    """

    evaluate: Evaluate
    crossover: Crossover
    mutate: Mutate
    repair: Repair


@dataclass(frozen=True, eq=False)
class NsgaResult:
    """Final population sorted best first (objective ascending) and how many evaluations the run made."""

    population: IntArray
    objective: FloatArray
    evaluations: int


@dataclass(frozen=True, eq=False)
class GeneticState:
    """A genetic policy's final population, handed to the next round as ``RoundSnapshot.policy_state``.

    ``population`` is (P, J, *tail) with its job axis indexed by ``job_names``; ``kind`` names the encoding
    so one policy never reads another's population.
    """

    kind: str
    job_names: tuple[str, ...]
    population: IntArray

    def reindex(self, kind: str, job_names: tuple[str, ...], tail: tuple[int, ...], fill: int) -> IntArray | None:
        """The population re-indexed to ``job_names``: rows of jobs seen before are copied, new jobs get
        ``fill``, departed jobs are dropped. None if the encoding or the trailing shape differs."""
        pop = np.asarray(self.population)
        if kind != self.kind or pop.ndim != 2 + len(tail) or pop.shape[2:] != tail or len(pop) == 0:
            return None
        if pop.shape[1] != len(self.job_names):
            return None
        where = {name: i for i, name in enumerate(self.job_names)}
        src = np.array([where.get(n, -1) for n in job_names], dtype=np.int64)
        out = np.full((len(pop), len(job_names), *tail), fill, dtype=np.int64)
        have = src >= 0
        out[:, have] = pop[:, src[have]]
        return out


def policy_rng(seed: int, snap: RoundSnapshot) -> np.random.Generator:
    """The round's generator: a function of the policy's seed and the snapshot's time (ms) only."""
    return np.random.default_rng([int(seed), round(max(float(snap.time_s), 0.0) * 1000.0)])


def job_order(snap: RoundSnapshot) -> IntArray:
    """Pollux's job order (reference §4.1): least attained GPU-service first, then oldest, then index."""
    j = snap.num_jobs
    return np.lexsort((np.arange(j), -np.asarray(snap.age_s, np.float64), np.asarray(snap.attained_gpu_s))).astype(
        np.int64
    )


def check_ga_params(policy: str, population: Any, generations: Any, seed: Any, engine: Any) -> None:
    """Raise OakInputError naming the field if a genetic policy's budget, seed or engine is unusable."""

    def is_int(v: Any) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool)

    if not is_int(population) or population < 2:
        raise OakInputError(
            f"{policy}: population={population!r}; expected an integer >= 2 (binary tournaments need two)"
        )
    if not is_int(generations) or generations < 1:
        raise OakInputError(
            f"{policy}: generations={generations!r}; expected an integer >= 1 (1 = the initial population only)"
        )
    if not is_int(seed) or seed < 0:
        raise OakInputError(f"{policy}: seed={seed!r}; expected an integer >= 0")
    if engine not in ENGINES:
        raise OakInputError(f"{policy}: engine={engine!r}; expected one of {ENGINES}")


def nsga2(
    initial: IntArray,
    ops: GeneticOperators,
    *,
    population: int,
    generations: int,
    rng: np.random.Generator,
    engine: str = "numpy",
    eliminate_duplicates: bool = False,
) -> NsgaResult:
    """Run NSGA-II from ``initial`` (P, *shape), P == population; returns the final population, best first.

    ``eliminate_duplicates``: replace offspring equal to each other or to the population by further
    matings (see :func:`_offspring`); without it, duplicates are only ranked last at survival.
    """
    initial = np.asarray(initial, dtype=np.int64)
    if len(initial) != population:
        raise ValueError(f"initial population has {len(initial)} individuals; expected {population}")
    if engine == "pymoo":
        return _nsga2_pymoo(initial, ops, population, generations, rng, eliminate_duplicates)
    if engine != "numpy":
        raise ValueError(f"engine {engine!r}: nsga2 runs 'numpy' or 'pymoo' (the policies run 'numba' themselves)")
    x = ops.repair(initial, rng)
    f = ops.evaluate(x)
    x, f = _survive(x, f, population, rng)
    evaluations = len(x)
    for _ in range(generations - 1):
        off = _offspring(x, f, ops, population, rng, MATING_TRIES if eliminate_duplicates else 1)
        if len(off) == 0:
            continue
        f_off = ops.evaluate(off)
        evaluations += len(off)
        x, f = _survive(np.concatenate([x, off]), np.concatenate([f, f_off]), population, rng)
    return NsgaResult(population=x, objective=f, evaluations=evaluations)


def _offspring(
    x: IntArray, f: FloatArray, ops: GeneticOperators, population: int, rng: np.random.Generator, tries: int
) -> IntArray:
    """``population`` offspring (tries = 1), or up to that many, none equal to each other or to a member of
    ``x`` (pymoo's duplicate elimination: mate again for the missing ones, at most ``tries`` times, and
    stop early when a whole mating brings nothing new)."""
    n_mate = (population + 1) // 2
    if tries <= 1:
        p1, p2 = _tournament(f, n_mate, rng)
        a, b = x[p1], x[p2]
        c1, c2 = ops.crossover(a, b, rng)
        cross = (rng.random(n_mate) < CROSSOVER_PROB).reshape((n_mate,) + (1,) * (x.ndim - 1))
        off = np.concatenate([np.where(cross, c1, a), np.where(cross, c2, b)])[:population]
        return ops.repair(ops.mutate(off, rng), rng)
    seen = set(_row_keys(x).tolist())
    batches: list[IntArray] = []
    have = 0
    for _ in range(tries):
        p1, p2 = _tournament(f, n_mate, rng)
        a, b = x[p1], x[p2]
        c1, c2 = ops.crossover(a, b, rng)
        cross = (rng.random(n_mate) < CROSSOVER_PROB).reshape((n_mate,) + (1,) * (x.ndim - 1))
        off = ops.repair(ops.mutate(np.concatenate([np.where(cross, c1, a), np.where(cross, c2, b)]), rng), rng)
        keep = np.zeros(len(off), dtype=bool)
        for i, key in enumerate(_row_keys(off).tolist()):
            if key not in seen:
                seen.add(key)
                keep[i] = True
        batches.append(off[keep])
        have += int(keep.sum())
        if have >= population or not keep.any():  # enough, or the reachable space looks exhausted
            break
    return np.concatenate(batches)[:population]


def _tournament(f: FloatArray, n_mate: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
    """Binary tournaments on random permutations (as pymoo's TournamentSelection): 2·n_mate winners."""
    n = len(f)
    need = 4 * n_mate
    perms = np.argsort(rng.random((math.ceil(need / n), n)), axis=1).ravel()[:need].reshape(-1, 2)
    a, b = perms[:, 0], perms[:, 1]
    coin = rng.random(len(a)) < 0.5
    win = np.where(f[a] < f[b], a, np.where(f[b] < f[a], b, np.where(coin, a, b)))
    return win[:n_mate], win[n_mate:]


def _survive(x: IntArray, f: FloatArray, n: int, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
    """Elitist truncation: unique individuals before duplicates, then lower F, then at random."""
    dup = _duplicates(x)
    keep = np.lexsort((rng.random(len(x)), f, dup))[:n]
    return x[keep], f[keep]


@functools.lru_cache(maxsize=32)
def _hash_weights(n: int) -> npt.NDArray[np.uint64]:
    """Fixed odd 64-bit weights for row hashing (a constant of n, not a source of randomness)."""
    w = np.random.default_rng(n).integers(1, 2**63, size=n, dtype=np.uint64) | np.uint64(1)
    w.setflags(write=False)
    return w


def _row_keys(x: IntArray) -> npt.NDArray[np.uint64]:
    """A 64-bit hash of each individual (P, *shape) → (P,)."""
    flat = x.reshape(len(x), -1).astype(np.uint64)
    return np.asarray((flat * _hash_weights(flat.shape[1])[None, :]).sum(axis=1, dtype=np.uint64))


def _duplicates(x: IntArray) -> npt.NDArray[np.bool_]:
    """Whether each individual equals an earlier one (compared through :func:`_row_keys`; a collision can
    only move a unique individual behind the others, never change an objective)."""
    _, first = np.unique(_row_keys(x), return_index=True)
    dup = np.ones(len(x), dtype=bool)
    dup[first] = False
    return dup


def _nsga2_pymoo(
    initial: IntArray,
    ops: GeneticOperators,
    population: int,
    generations: int,
    rng: np.random.Generator,
    eliminate_duplicates: bool,
) -> NsgaResult:
    """The same run driven by pymoo's NSGA2 (reference engine; see the module docstring for its cost)."""
    from pymoo.algorithms.moo.nsga2 import NSGA2  # type: ignore[import-untyped]
    from pymoo.core.crossover import Crossover as PymooCrossover  # type: ignore[import-untyped]
    from pymoo.core.mutation import Mutation as PymooMutation  # type: ignore[import-untyped]
    from pymoo.core.problem import Problem as PymooProblem  # type: ignore[import-untyped]
    from pymoo.core.repair import Repair as PymooRepair  # type: ignore[import-untyped]
    from pymoo.core.sampling import Sampling as PymooSampling  # type: ignore[import-untyped]
    from pymoo.optimize import minimize  # type: ignore[import-untyped]

    shape = initial.shape[1:]
    n_var = int(np.prod(shape))

    def unflat(x: Any) -> IntArray:
        return np.asarray(x, dtype=np.int64).reshape((-1, *shape))

    def gen(random_state: Any) -> np.random.Generator:
        return random_state if isinstance(random_state, np.random.Generator) else rng

    class _Problem(PymooProblem):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(n_var=n_var, n_obj=1, vtype=int)

        def _evaluate(self, x: Any, out: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            out["F"] = ops.evaluate(unflat(x))[:, None]

    class _Sampling(PymooSampling):  # type: ignore[misc]
        def _do(self, problem: Any, n_samples: int, *args: Any, random_state: Any = None, **kwargs: Any) -> Any:
            return initial.reshape(len(initial), -1)[:n_samples]

    class _Crossover(PymooCrossover):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(n_parents=2, n_offsprings=2, prob=CROSSOVER_PROB)

        def _do(self, problem: Any, x: Any, *args: Any, random_state: Any = None, **kwargs: Any) -> Any:
            c1, c2 = ops.crossover(unflat(x[0]), unflat(x[1]), gen(random_state))
            return np.stack([c1.reshape(len(c1), -1), c2.reshape(len(c2), -1)])

    class _Mutation(PymooMutation):  # type: ignore[misc]
        def _do(self, problem: Any, x: Any, *args: Any, random_state: Any = None, **kwargs: Any) -> Any:
            return ops.mutate(unflat(x), gen(random_state)).reshape(len(x), -1)

    class _Repair(PymooRepair):  # type: ignore[misc]
        def _do(self, problem: Any, x: Any, **kwargs: Any) -> Any:
            return ops.repair(unflat(x), gen(kwargs.get("random_state"))).reshape(len(x), -1)

    algorithm = NSGA2(
        pop_size=population,
        sampling=_Sampling(),
        crossover=_Crossover(),
        mutation=_Mutation(),
        repair=_Repair(),
        eliminate_duplicates=eliminate_duplicates,
    )
    seed = int(rng.integers(2**31 - 1))
    res = minimize(_Problem(), algorithm, ("n_gen", generations), seed=seed, verbose=False)
    x = unflat(res.pop.get("X"))
    f = np.asarray(res.pop.get("F"), dtype=np.float64)[:, 0]
    order = np.argsort(f, kind="stable")
    return NsgaResult(population=x[order], objective=f[order], evaluations=int(res.algorithm.evaluator.n_eval))
