"""Placement (paper §III, inherited from Sia; reference §5.6).

Keep a job's GPUs when its configuration is unchanged; multi-node jobs take whole free nodes (highest node
index first); single-node jobs are packed best-fit (the fullest node that still fits, lowest index on ties).
If keeping GPUs fragments the cluster so that a job no longer fits, every job is re-placed from scratch
(largest first), which always succeeds for Sia's configuration sets (powers of two inside a node, whole nodes
beyond) whenever per-type capacity holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from oak.model.cluster import Cluster
from oak.model.config import Configuration


class PlacementError(RuntimeError):
    """No placement exists for the requested configurations."""


GpuSet = tuple[int, ...]


def place(
    cluster: Cluster,
    configs: Sequence[Configuration | None],
    previous: Sequence[GpuSet],
    previous_configs: Sequence[Configuration | None],
    down: frozenset[int] = frozenset(),
    health: Sequence[int] | None = None,
    risk: Sequence[float] | None = None,
    flat: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[GpuSet]:
    """GPU ids for each job (empty tuple for no configuration).

    ``configs[i]``: the configuration chosen for job i; ``previous[i]``/``previous_configs[i]``: what it held;
    ``down``: nodes out of service (none of their GPUs is used); ``health``: observed failures per node — when
    given, new placements take the nodes with the fewest first (the usual order among equals); ``risk``: the
    GPU-seconds a failure would cost each job — with ``health``, among jobs of the same shape the one with the
    most at risk is placed first, on the healthiest nodes. ``flat``: ``previous`` flattened, if the caller has it
    (the index into ``previous`` of each GPU and the GPU ids, in ``previous``'s order).
    """
    kept = [
        c is not None and (c is pc or c == pc) and len(prev) == c.gpus
        for c, pc, prev in zip(configs, previous_configs, previous, strict=True)
    ]
    result = _try_place(cluster, configs, previous, kept, down, health, risk, flat)
    if result is None:
        result = _try_place(cluster, configs, previous, [False] * len(configs), down, health, risk)
    if result is None:
        raise PlacementError("no placement fits the chosen configurations")
    return result


def _try_place(
    cluster: Cluster,
    configs: Sequence[Configuration | None],
    previous: Sequence[GpuSet],
    kept: Sequence[bool],
    down: frozenset[int] = frozenset(),
    health: Sequence[int] | None = None,
    risk: Sequence[float] | None = None,
    flat: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[GpuSet] | None:
    """One placement attempt (``place``): the kept jobs' GPUs, then the others; None where one does not fit. The
    free GPUs are a mask over the cluster's GPU ids and a count per node, so a round costs one pass over the
    GPUs plus the jobs it places (each takes the lowest free ids of the node it lands on)."""
    arrays = cluster.arrays
    first, size = arrays.first_gpu, arrays.node_gpus
    out: list[GpuSet] = [() for _ in configs]
    taken = np.zeros(cluster.total_gpus, dtype=bool)
    keep = [i for i, k in enumerate(kept) if k]
    down_node = np.zeros(len(size), dtype=bool)
    if down:
        down_node[list(down)] = True
    if keep:
        if flat is None:
            held = np.fromiter(itertools.chain.from_iterable(previous[i] for i in keep), dtype=np.int64)
        else:  # the same ids in the same order: the kept sets' GPUs, in job order
            held = flat[1][np.asarray(kept, dtype=bool)[flat[0]]]
        taken[held] = True
        if int(np.count_nonzero(taken)) != len(held) or bool(down_node[arrays.gpu_node[held]].any()):
            raise ValueError("kept placements overlap or lie on a node out of service")
        for i in keep:
            out[i] = previous[i]
    free = size - np.add.reduceat(taken.view(np.int8), first).astype(np.int64)
    free[down_node] = 0
    todo = [i for i, c in enumerate(configs) if c is not None and not kept[i]]
    at_risk = risk if risk is not None and health is not None else [0.0] * len(configs)
    todo.sort(key=lambda i: (-_cfg(configs, i).nodes, -_cfg(configs, i).gpus, -at_risk[i], i))
    healthy = None if health is None else np.asarray(health, dtype=np.int64)
    for i in todo:
        cfg = _cfg(configs, i)
        ids = arrays.type_nodes.get(cfg.gpu_type)
        if ids is None:
            return None
        if cfg.nodes > 1:
            per_node = cfg.gpus // cfg.nodes
            cand = ids[::-1]  # highest node index first
            whole = cand[(free[cand] == size[cand]) & (size[cand] >= per_node) & ~down_node[cand]]
            if healthy is not None:  # stable: the usual order among equally healthy nodes
                whole = whole[np.argsort(healthy[whole], kind="stable")]
            if len(whole) < cfg.nodes:
                return None
            gpus: list[int] = []
            for nid in sorted(whole[: cfg.nodes].tolist()):  # a whole node: its lowest ids are free
                f = int(first[nid])
                gpus.extend(range(f, f + per_node))
                taken[f : f + per_node] = True
                free[nid] -= per_node
            out[i] = tuple(gpus)
        else:
            fits = ids[free[ids] >= cfg.gpus]  # ascending node ids
            if len(fits) == 0:
                return None
            if healthy is None:  # the fullest node that fits, lowest index on ties
                nid = int(fits[np.argmin(free[fits])])
            else:
                nid = int(fits[np.lexsort((fits, free[fits], healthy[fits]))[0]])
            f = int(first[nid])
            local = np.flatnonzero(~taken[f : f + int(size[nid])])[: cfg.gpus] + f
            taken[local] = True
            free[nid] -= cfg.gpus
            out[i] = tuple(local.tolist())
    return out


def _cfg(configs: Sequence[Configuration | None], i: int) -> Configuration:
    c = configs[i]
    assert c is not None
    return c


def place_replicas(
    cluster: Cluster,
    replicas: Sequence[Sequence[int]],
    previous: Sequence[GpuSet],
) -> list[GpuSet]:
    """GPU ids for explicit per-node replica counts (``replicas[i][k]`` GPUs of node k for job i).

    On each node a job keeps the GPUs it held there when its count on that node is unchanged; the others take
    the lowest free GPUs. The caller guarantees per-node capacity.
    """
    n_nodes = len(cluster.nodes)
    held: list[dict[int, list[int]]] = []
    for prev in previous:
        by_node: dict[int, list[int]] = {}
        for g in prev:
            by_node.setdefault(cluster.node_of_gpu(g), []).append(g)
        held.append(by_node)
    out: list[list[int]] = [[] for _ in replicas]
    for k in range(n_nodes):
        first = cluster.first_gpu[k]
        free = set(range(first, first + cluster.nodes[k].gpus))
        movers = []
        for i, row in enumerate(replicas):
            want = int(row[k])
            if want <= 0:
                continue
            mine = held[i].get(k, [])
            if len(mine) == want:
                out[i].extend(mine)
                free.difference_update(mine)
            else:
                movers.append((i, want))
        pool = sorted(free)
        for i, want in movers:
            if want > len(pool):
                raise PlacementError(f"node {k}: {want} GPUs requested, {len(pool)} free")
            out[i].extend(pool[:want])
            del pool[:want]
    return [tuple(sorted(g)) for g in out]
