"""Per-simulation goodput lookup: best batch choice of every application on every cluster configuration.

A cluster is described by C configurations c = (gpu_types[c], nodes[c], replicas[c]). For an application at a
given epoch, :meth:`GoodputTable.choices` returns the :class:`~oak.goodput.batch.BatchChoice` of every configuration
(arrays of length C). Entries are computed once per (app, epoch), vectorised over all configurations of a GPU
type, and cached; later calls are a dict lookup. Returned arrays are read-only because they are shared.

Cross-type projection (reference §3.6, :mod:`oak.goodput.projection`): when an application has no fitted model
on a GPU type A of the table but has one on another type B, its choices on A are B's best-batch choices at
(⌈K/R_B⌉ nodes, K replicas), with goodput and progress rate multiplied by x1_A/x1_B. x1_t is the 1-GPU throughput
on type t: the largest allowed per-GPU batch b_max(t) divided by its 1-GPU step time T_iter(1, 1, b_max, 0) from
the fitted model (samples/s). The application has no model on A, so its x1_A/x1_B is estimated by the geometric
mean of x1_A/x1_B over the catalog's other applications fitted on both A and B (how much faster one A GPU is
than one B GPU on those jobs). B is the first type, in the table's order and then by name, on which the
application is fitted and such a reference exists; R_B is the GPUs per node of B in the table (the largest
⌈R/N⌉ of B's configurations), or of B's profiled nodes when B is not in the table. Without a source type the
application cannot run on A (goodput 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from oak.goodput.batch import BatchChoice, BatchGrid, batch_grid, best_from_grid
from oak.goodput.projection import projected_shapes, scale_choice, single_gpu_throughput

if TYPE_CHECKING:  # the catalog imports oak.goodput.throughput; avoid an import cycle at run time
    from oak.catalog.schema import AppProfile, Catalog

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Projection:
    """How an application's goodput on a type without a fitted model is projected (reference §3.6).

    Attributes:
        source: the type B whose fitted model is used.
        ratio: estimated x1_A / x1_B (dimensionless, > 0).
        gpus_per_node: R_B, GPUs per node of type B.
        reference_apps: the applications fitted on both types whose x1 ratios were averaged.
    """

    source: str
    ratio: float
    gpus_per_node: int
    reference_apps: tuple[str, ...]


class GoodputTable:
    """Cached best-batch goodput of each application on the cluster's C configurations."""

    def __init__(
        self,
        catalog: Catalog,
        nodes: npt.ArrayLike,
        replicas: npt.ArrayLike,
        gpu_types: Sequence[str],
        gpus_per_node: Mapping[str, int] | None = None,
        project: bool = True,
    ) -> None:
        """Args:
        catalog: application profiles.
        nodes, replicas: N and R of each configuration (length C).
        gpu_types: GPU type of each configuration (length C).
        gpus_per_node: GPUs per node of each type, for the projection's R_B (default: inferred, see the module).
        project: estimate goodput on types an application has no model for (reference §3.6); off: goodput 0.
        """
        self._catalog = catalog
        n = np.asarray(nodes, dtype=np.int64).reshape(-1)
        r = np.asarray(replicas, dtype=np.int64).reshape(-1)
        types = list(gpu_types)
        if not n.shape[0] == r.shape[0] == len(types):
            raise ValueError(
                f"nodes, replicas and gpu_types must have the same length, got {n.shape[0]}, {r.shape[0]}, {len(types)}"
            )
        self._nodes: IntArray = n
        self._replicas: IntArray = r
        self._gpu_types: tuple[str, ...] = tuple(types)
        # Per GPU type: configuration indices, unique (N, R) pairs, and the map from configs to unique pairs.
        self._groups: dict[str, tuple[npt.NDArray[np.intp], IntArray, IntArray, npt.NDArray[np.intp]]] = {}
        type_arr = np.asarray(types, dtype=object)
        for t in sorted(set(types)):
            idx = np.flatnonzero(type_arr == t)
            pairs = np.stack([n[idx], r[idx]], axis=1)
            uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
            self._groups[t] = (idx, uniq[:, 0].copy(), uniq[:, 1].copy(), inverse.reshape(-1))
        self._cache: dict[tuple[str, int], BatchChoice] = {}
        # GPUs per node of each type in the table: multi-node configurations take whole nodes, so ⌈R/N⌉ ≤ R_t.
        self._per_node: dict[str, int] = {
            t: int(np.max(-(-r[idx] // np.maximum(n[idx], 1)))) for t, (idx, *_rest) in self._groups.items()
        }
        if gpus_per_node is not None:
            self._per_node.update({t: int(v) for t, v in gpus_per_node.items()})
        self._project = project
        self._projections: dict[tuple[str, str], Projection | None] = {}
        self._x1: dict[tuple[str, str], float] = {}
        self._grids: dict[tuple[str, str], BatchGrid] = {}
        self._parent: GoodputTable | None = None

    def subset(self, columns: npt.ArrayLike) -> GoodputTable:
        """This table on configurations ``columns`` only (in that order): the same values there, bit for bit, since
        each configuration's best batch is found on its own and projections are this table's; none of the other
        configurations' work is done (a simulator's rounds read a few dozen of a cluster's thousands of shapes)."""
        cols = np.asarray(columns, dtype=np.int64).reshape(-1)
        out = GoodputTable(
            self._catalog,
            self._nodes[cols],
            self._replicas[cols],
            [self._gpu_types[c] for c in cols.tolist()],
            gpus_per_node=self._per_node,
            project=self._project,
        )
        out._parent = self
        return out

    def _grid(
        self, app: str, gpu_type: str, params: Any, m0: float, m_max: float, b_min: float, b_max: float, n: Any, r: Any
    ) -> BatchGrid:
        """The epoch-independent candidate grid of ``app`` on ``gpu_type``'s shapes, computed once."""
        key = (app, gpu_type)
        hit = self._grids.get(key)
        if hit is None:
            hit = batch_grid(params, m0, m_max, b_min, b_max, n, r)
            self._grids[key] = hit
        return hit

    @property
    def size(self) -> int:
        """Number of configurations C."""
        return int(self._nodes.shape[0])

    @property
    def nodes(self) -> IntArray:
        """N of each configuration (copy)."""
        return self._nodes.copy()

    @property
    def replicas(self) -> IntArray:
        """R of each configuration (copy)."""
        return self._replicas.copy()

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU type of each configuration."""
        return self._gpu_types

    def has_profile(self, app: str, gpu_type: str) -> bool:
        """Whether the table can give ``app`` a goodput on ``gpu_type``: a fitted model or a projection."""
        return self.has_fitted_profile(app, gpu_type) or self.projection(app, gpu_type) is not None

    def has_fitted_profile(self, app: str, gpu_type: str) -> bool:
        """Whether the catalog has a fitted throughput model of ``app`` on ``gpu_type``."""
        profile = self._catalog.apps.get(app)
        return profile is not None and gpu_type in profile.gpus

    def x1(self, app: str, gpu_type: str) -> float:
        """1-GPU throughput of ``app`` on ``gpu_type`` (samples/s): b_max / T_iter(1, 1, b_max, 0) of the fitted
        model. KeyError when there is no fitted model."""
        key = (app, gpu_type)
        hit = self._x1.get(key)
        if hit is None:
            gpu = self._catalog.app(app).gpus[gpu_type]
            hit = single_gpu_throughput(gpu.params, gpu.b_max)
            self._x1[key] = hit
        return hit

    def projection(self, app: str, gpu_type: str) -> Projection | None:
        """How ``app``'s goodput on ``gpu_type`` is projected, or None (fitted there, unknown app, projection
        off, or no source type with a reference application)."""
        if self._parent is not None:  # a subset projects as its table does (the same source type, ratio and R_B)
            return self._parent.projection(app, gpu_type)
        key = (app, gpu_type)
        if key in self._projections:
            return self._projections[key]
        out = self._find_projection(app, gpu_type)
        self._projections[key] = out
        return out

    def _find_projection(self, app: str, gpu_type: str) -> Projection | None:
        profile = self._catalog.apps.get(app)
        if not self._project or profile is None or gpu_type in profile.gpus:
            return None
        in_table = [t for t in dict.fromkeys(self._gpu_types) if t in profile.gpus]
        others = sorted(t for t in profile.gpus if t not in in_table)
        for src in in_table + others:
            refs = tuple(
                sorted(
                    name
                    for name, other in self._catalog.apps.items()
                    if name != app and gpu_type in other.gpus and src in other.gpus
                )
            )
            if not refs:
                continue
            logs = [math.log(self.x1(r, gpu_type) / self.x1(r, src)) for r in refs]
            ratio = math.exp(sum(logs) / len(logs))
            per_node = self._per_node.get(src)
            if per_node is None:
                g = profile.gpus[src]
                per_node = max(1, -(-g.max_replicas_profiled // g.max_nodes_profiled))
            return Projection(source=src, ratio=ratio, gpus_per_node=per_node, reference_apps=refs)
        return None

    def choices(self, app: str, epoch: int) -> BatchChoice:
        """Best batch choice of ``app`` at ``epoch`` on every configuration (arrays of length C).

        ``epoch`` is clipped to [0, max_epochs − 1]. On a GPU type without a fitted model the choices are projected
        (module doc); configurations that cannot run ``app`` (no model and no projection, batch limits) have
        goodput 0. Goodput and progress rate are uncalibrated.
        """
        key = (app, epoch)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        profile = self._catalog.app(app)
        e = min(max(int(epoch), 0), profile.max_epochs - 1)
        ckey = (app, e)
        hit = self._cache.get(ckey)
        if hit is None:
            hit = self._compute(profile, e)
            self._cache[ckey] = hit
        self._cache[key] = hit
        return hit

    def choices_of(self, profile: AppProfile, epoch: int, grids: dict[str, BatchGrid]) -> BatchChoice:
        """Best batch choice of an application profile that is not the catalog's — the same application with
        other throughput models (a job's learned beliefs, :mod:`oak.engine.beliefs`) — at ``epoch`` on every
        configuration. Nothing is cached in the table; ``grids`` (per GPU type, owned by the caller) holds the
        epoch-independent grids of this profile. Projection to types without a model follows the catalog's
        application of the same name (its source type and x1 ratio), evaluated with ``profile``'s model."""
        e = min(max(int(epoch), 0), profile.max_epochs - 1)
        return self._compute(profile, e, grids)

    def _compute(self, profile: AppProfile, epoch: int, grids: dict[str, BatchGrid] | None = None) -> BatchChoice:
        c = self.size

        def grid_of(t: str, gpu: Any, n: Any, r: Any) -> BatchGrid:
            if grids is None:
                return self._grid(profile.name, t, gpu.params, profile.m0, profile.m_max, gpu.b_min, gpu.b_max, n, r)
            hit = grids.get(t)
            if hit is None:
                hit = batch_grid(gpu.params, profile.m0, profile.m_max, gpu.b_min, gpu.b_max, n, r)
                grids[t] = hit
            return hit

        goodput = np.zeros(c)
        local_bsz = np.zeros(c, dtype=np.int64)
        accum = np.zeros(c, dtype=np.int64)
        batch = np.zeros(c, dtype=np.int64)
        iter_time = np.zeros(c)
        rate = np.zeros(c)

        def sqr_at(m: FloatArray) -> FloatArray:
            return profile.grad_stats(epoch, m)[0]

        def var_at(m: FloatArray) -> FloatArray:
            return profile.grad_stats(epoch, m)[1]

        for t, (idx, un, ur, inverse) in self._groups.items():
            gpu = profile.gpus.get(t)
            if gpu is not None:
                grid = grid_of(t, gpu, un, ur)
                ch = best_from_grid(grid, profile.m0, sqr_at, var_at)
            else:
                proj = self.projection(profile.name, t)
                if proj is None:
                    continue
                src = profile.gpus[proj.source]
                nb, rb = projected_shapes(ur, proj.gpus_per_node)
                grid = grid_of(f"{t}<-{proj.source}", src, nb, rb)
                ch_b = best_from_grid(grid, profile.m0, sqr_at, var_at)
                ch = scale_choice(ch_b, proj.ratio)
            goodput[idx] = ch.goodput[inverse]
            local_bsz[idx] = ch.local_bsz[inverse]
            accum[idx] = ch.accum_steps[inverse]
            batch[idx] = ch.batch[inverse]
            iter_time[idx] = ch.iter_time_s[inverse]
            rate[idx] = ch.progress_rate[inverse]
        for a in (goodput, local_bsz, accum, batch, iter_time, rate):
            a.setflags(write=False)
        return BatchChoice(
            goodput=goodput,
            local_bsz=local_bsz,
            accum_steps=accum,
            batch=batch,
            iter_time_s=iter_time,
            progress_rate=rate,
        )
