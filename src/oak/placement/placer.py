"""Placement (paper §III, inherited from Sia; reference §5.6).

Keep a job's GPUs when its configuration is unchanged; multi-node jobs take whole free nodes (highest node
index first); single-node jobs are packed best-fit (the fullest node that still fits, lowest index on ties).
If keeping GPUs fragments the cluster so that a job no longer fits, every job is re-placed from scratch
(largest first), which always succeeds for Sia's configuration sets (powers of two inside a node, whole nodes
beyond) whenever per-type capacity holds.
"""

from __future__ import annotations

from collections.abc import Sequence

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
) -> list[GpuSet]:
    """GPU ids for each job (empty tuple for no configuration).

    ``configs[i]``: the configuration chosen for job i; ``previous[i]``/``previous_configs[i]``: what it held;
    ``down``: nodes out of service (none of their GPUs is used); ``health``: observed failures per node — when
    given, new placements take the nodes with the fewest first (the usual order among equals); ``risk``: the
    GPU-seconds a failure would cost each job — with ``health``, among jobs of the same shape the one with the
    most at risk is placed first, on the healthiest nodes.
    """
    kept = [
        c is not None and (c is pc or c == pc) and len(prev) == c.gpus
        for c, pc, prev in zip(configs, previous_configs, previous, strict=True)
    ]
    result = _try_place(cluster, configs, previous, kept, down, health, risk)
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
) -> list[GpuSet] | None:
    out: list[GpuSet] = [() for _ in configs]
    taken: set[int] = set()
    n_kept = 0
    for i, keep in enumerate(kept):
        if keep:
            taken.update(previous[i])
            n_kept += len(previous[i])
            out[i] = previous[i]
    gpu_nodes = cluster.gpu_nodes
    touched = {gpu_nodes[g] for g in taken}
    if len(taken) != n_kept or not touched.isdisjoint(down):
        raise ValueError("kept placements overlap or lie on a node out of service")
    free: list[list[int]] = [
        []
        if node.node_id in down
        else [g for g in range(first, first + node.gpus) if g not in taken]
        if node.node_id in touched
        else list(range(first, first + node.gpus))
        for first, node in zip(cluster.first_gpu, cluster.nodes, strict=True)
    ]
    todo = [i for i, c in enumerate(configs) if c is not None and not kept[i]]
    at_risk = risk if risk is not None and health is not None else [0.0] * len(configs)
    todo.sort(key=lambda i: (-_cfg(configs, i).nodes, -_cfg(configs, i).gpus, -at_risk[i], i))
    by_type = cluster.nodes_of_type
    for i in todo:
        cfg = _cfg(configs, i)
        nodes = by_type.get(cfg.gpu_type, ())
        if cfg.nodes > 1:
            per_node = cfg.gpus // cfg.nodes
            whole = [
                n.node_id
                for n in reversed(nodes)
                if n.node_id not in down and len(free[n.node_id]) == n.gpus and n.gpus >= per_node
            ]
            if health is not None:
                whole.sort(key=lambda nid: health[nid])  # stable: the usual order among equally healthy nodes
            if len(whole) < cfg.nodes:
                return None
            gpus: list[int] = []
            for nid in sorted(whole[: cfg.nodes]):
                gpus.extend(free[nid][:per_node])
                del free[nid][:per_node]
            out[i] = tuple(gpus)
        else:
            fits = [n.node_id for n in nodes if len(free[n.node_id]) >= cfg.gpus]
            if not fits:
                return None
            nid = min(fits, key=lambda k: (len(free[k]), k) if health is None else (health[k], len(free[k]), k))
            out[i] = tuple(free[nid][: cfg.gpus])
            del free[nid][: cfg.gpus]
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
