"""Per-simulation goodput lookup: best batch choice of every application on every cluster configuration.

A cluster is described by C configurations c = (gpu_types[c], nodes[c], replicas[c]). For an application at a
given epoch, :meth:`GoodputTable.choices` returns the :class:`~oak.goodput.batch.BatchChoice` of every configuration
(arrays of length C). Entries are computed once per (app, epoch), vectorised over all configurations of a GPU
type, and cached; later calls are a dict lookup. Returned arrays are read-only because they are shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from oak.goodput.batch import BatchChoice, best_batch

if TYPE_CHECKING:  # the catalog imports oak.goodput.throughput; avoid an import cycle at run time
    from oak.catalog.schema import AppProfile, Catalog

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class GoodputTable:
    """Cached best-batch goodput of each application on the cluster's C configurations."""

    def __init__(
        self,
        catalog: Catalog,
        nodes: npt.ArrayLike,
        replicas: npt.ArrayLike,
        gpu_types: Sequence[str],
    ) -> None:
        """Args:
        catalog: application profiles.
        nodes, replicas: N and R of each configuration (length C).
        gpu_types: GPU type of each configuration (length C).
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
        """Whether the catalog has a throughput model of ``app`` on ``gpu_type``."""
        profile = self._catalog.apps.get(app)
        return profile is not None and gpu_type in profile.gpus

    def choices(self, app: str, epoch: int) -> BatchChoice:
        """Best batch choice of ``app`` at ``epoch`` on every configuration (arrays of length C).

        ``epoch`` is clipped to [0, max_epochs − 1]. Configurations whose GPU type has no profile for ``app``,
        or that cannot run it, have goodput 0. Goodput and progress rate are uncalibrated.
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

    def _compute(self, profile: AppProfile, epoch: int) -> BatchChoice:
        c = self.size
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
            if gpu is None:
                continue
            ch = best_batch(gpu.params, profile.m0, profile.m_max, gpu.b_min, gpu.b_max, sqr_at, var_at, un, ur)
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
