"""The placer before its free-GPU bookkeeping was vectorised (Python lists of free GPUs per node), kept as the
reference that ``oak.placement.placer._try_place`` must agree with placement for placement (tests/test_placement.py).
Where an attempt stops, the kept jobs evicted are the product's ``evictions`` on this placer's state, so a
difference in the job or the free GPUs it reports shows in the final placements; the eviction rule itself is
tested by the hand-built rounds there."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oak.model.cluster import Cluster
from oak.model.config import Configuration
from oak.placement.placer import Blocked, GpuSet, _cfg, evictions, placed_order


def reference_place(
    cluster: Cluster,
    configs: Sequence[Configuration | None],
    previous: Sequence[GpuSet],
    previous_configs: Sequence[Configuration | None],
    down: frozenset[int] = frozenset(),
    health: Sequence[int] | None = None,
    risk: Sequence[float] | None = None,
) -> list[GpuSet] | None:
    """``place`` with the list-based attempts: None where no placement fits."""
    kept = [
        c is not None and (c is pc or c == pc) and len(prev) == c.gpus
        for c, pc, prev in zip(configs, previous_configs, previous, strict=True)
    ]
    for _ in range(sum(kept) + 1):
        result = _try_place(cluster, configs, previous, kept, down, health, risk)
        if not isinstance(result, Blocked):
            return result
        if not any(kept):
            return None
        victims = evictions(cluster, configs, previous, kept, result, placed_order(configs, health, risk))
        if not victims:
            break
        kept = [k and i not in victims for i, k in enumerate(kept)]
    result = _try_place(cluster, configs, previous, [False] * len(configs), down, health, risk)
    return None if isinstance(result, Blocked) else result


def _try_place(
    cluster: Cluster,
    configs: Sequence[Configuration | None],
    previous: Sequence[GpuSet],
    kept: Sequence[bool],
    down: frozenset[int] = frozenset(),
    health: Sequence[int] | None = None,
    risk: Sequence[float] | None = None,
) -> list[GpuSet] | Blocked:
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
                return Blocked(i, np.array([len(f) for f in free], dtype=np.int64))
            gpus: list[int] = []
            for nid in sorted(whole[: cfg.nodes]):
                gpus.extend(free[nid][:per_node])
                del free[nid][:per_node]
            out[i] = tuple(gpus)
        else:
            fits = [n.node_id for n in nodes if len(free[n.node_id]) >= cfg.gpus]
            if not fits:
                return Blocked(i, np.array([len(f) for f in free], dtype=np.int64))
            nid = min(fits, key=lambda k: (len(free[k]), k) if health is None else (health[k], len(free[k]), k))
            out[i] = tuple(free[nid][: cfg.gpus])
            del free[nid][: cfg.gpus]
    return out
