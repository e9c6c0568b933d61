"""Placement (paper §III, inherited from Sia; reference §5.6).

Keep a job's GPUs when its configuration is unchanged; multi-node jobs take whole free nodes (highest node
index first); single-node jobs are packed best-fit (the fullest node that still fits, lowest index on ties).
If keeping GPUs fragments the cluster so that a job no longer fits, the fewest, then smallest, single-node jobs
that block it are evicted and re-placed with the others (reference §5.6), as often as needed; only where no
single-node job can make room is every job re-placed from scratch (largest first), which always succeeds for
Sia's configuration sets (powers of two inside a node, whole nodes beyond) whenever per-type capacity holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from oak.model.cluster import Cluster
from oak.model.config import Configuration


class PlacementError(RuntimeError):
    """No placement exists for the requested configurations."""


GpuSet = tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Blocked:
    """A placement attempt that stopped: the job that found no room and each node's free GPUs at that moment."""

    job: int
    free: np.ndarray


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
    for _ in range(sum(kept) + 1):  # each pass evicts at least one kept job
        result = _try_place(cluster, configs, previous, kept, down, health, risk, flat)
        if not isinstance(result, Blocked):
            return result
        if not any(kept):
            raise PlacementError("no placement fits the chosen configurations")
        victims = evictions(cluster, configs, previous, kept, result, placed_order(configs, health, risk))
        if not victims:
            break
        kept = [k and i not in victims for i, k in enumerate(kept)]
    result = _try_place(cluster, configs, previous, [False] * len(configs), down, health, risk)
    if isinstance(result, Blocked):
        raise PlacementError("no placement fits the chosen configurations")
    return result


def placed_order(
    configs: Sequence[Configuration | None], health: Sequence[int] | None, risk: Sequence[float] | None
) -> Callable[[int], tuple[int, int, float, int]]:
    """The order jobs without kept GPUs are placed in (a sort key per job): multi-node first, then larger, then,
    where node health is known, the most at risk, then the lower index."""
    at_risk = risk if risk is not None and health is not None else [0.0] * len(configs)

    def key(i: int) -> tuple[int, int, float, int]:
        c = _cfg(configs, i)
        return (-c.nodes, -c.gpus, -at_risk[i], i)

    return key


def evictions(
    cluster: Cluster,
    configs: Sequence[Configuration | None],
    previous: Sequence[GpuSet],
    kept: Sequence[bool],
    blocked: Blocked,
    order: Callable[[int], tuple[int, int, float, int]],
) -> frozenset[int]:
    """The kept single-node jobs to re-place so that the job ``blocked`` stopped at finds room (empty: none can).

    Only jobs placed after the blocked one (``order``: ``placed_order``) are candidates: one placed before it
    would take back the room it left. A single-node job needs one node of its type with enough free GPUs: on each
    such node, the fewest candidates (then the fewest GPUs, then the lowest job indices) that free enough; the
    node where that costs least (lowest index on ties). A multi-node job needs whole free nodes: the nodes held
    only by candidates none of which fills its node (it would need a whole node itself), those with the fewest
    jobs (then GPUs; highest index first on ties, as whole nodes are taken) until there are enough. Nodes holding
    a multi-node job, or a job placed in this attempt, are not emptied."""
    cfg = _cfg(configs, blocked.job)
    arrays = cluster.arrays
    nodes = arrays.type_nodes.get(cfg.gpu_type)
    if nodes is None:
        return frozenset()
    size, free = arrays.node_gpus, blocked.free
    singles: dict[int, list[int]] = {}  # node → its candidates, by job index
    gpus: dict[int, int] = {}
    after = order(blocked.job)
    for i, k in enumerate(kept):
        c = configs[i]
        if k and c is not None and c.nodes == 1:
            nid = int(arrays.gpu_node[previous[i][0]])
            if order(i) > after and (cfg.nodes == 1 or c.gpus < size[nid]):
                singles.setdefault(nid, []).append(i)
                gpus[i] = c.gpus
    if cfg.nodes == 1:
        best: tuple[tuple[int, int, int], tuple[int, ...]] | None = None
        for nid in nodes.tolist():
            on = singles.get(nid)
            if not on:
                continue
            pick = _fewest(on, cfg.gpus - int(free[nid]), gpus, len(on) if best is None else best[0][0])
            if pick is None:
                continue
            key = (len(pick), sum(gpus[i] for i in pick), nid)
            if best is None or key < best[0]:
                best = (key, pick)
        return frozenset(best[1]) if best is not None else frozenset()
    per_node = cfg.gpus // cfg.nodes
    whole = 0
    costs: list[tuple[int, int, int, int]] = []
    for rank, nid in enumerate(nodes[::-1].tolist()):  # highest index first
        if size[nid] < per_node:
            continue
        if free[nid] == size[nid]:
            whole += 1
            continue
        jobs = singles.get(nid, [])
        held = sum(gpus[i] for i in jobs)
        if jobs and free[nid] + held == size[nid]:  # held by candidates alone (no other kept or placed job)
            costs.append((len(jobs), held, rank, nid))
    short = cfg.nodes - whole
    if short <= 0 or len(costs) < short:
        return frozenset()
    costs.sort()
    return frozenset(i for *_, nid in costs[:short] for i in singles[nid])


def _fewest(jobs: list[int], need: int, gpus: dict[int, int], most: int) -> tuple[int, ...] | None:
    """The fewest of ``jobs`` whose GPUs add up to ``need`` or more (then the fewest GPUs, then the lowest
    indices); None where all of them do not, or where that takes more than ``most`` jobs."""
    if need <= 0:
        return None
    sizes = sorted((gpus[i] for i in jobs), reverse=True)
    k = next((n for n in range(1, len(sizes) + 1) if sum(sizes[:n]) >= need), None)
    if k is None or k > most:
        return None
    fits = [p for p in itertools.combinations(jobs, k) if sum(gpus[i] for i in p) >= need]
    return min(fits, key=lambda p: (sum(gpus[i] for i in p), p))


def _try_place(
    cluster: Cluster,
    configs: Sequence[Configuration | None],
    previous: Sequence[GpuSet],
    kept: Sequence[bool],
    down: frozenset[int] = frozenset(),
    health: Sequence[int] | None = None,
    risk: Sequence[float] | None = None,
    flat: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[GpuSet] | Blocked:
    """One placement attempt (``place``): the kept jobs' GPUs, then the others; where one does not fit, that job
    and the free GPUs per node at that moment (``Blocked``). The
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
    todo.sort(key=placed_order(configs, health, risk))
    healthy = None if health is None else np.asarray(health, dtype=np.int64)
    for i in todo:
        cfg = _cfg(configs, i)
        ids = arrays.type_nodes.get(cfg.gpu_type)
        if ids is None:
            return Blocked(i, free.copy())
        if cfg.nodes > 1:
            per_node = cfg.gpus // cfg.nodes
            cand = ids[::-1]  # highest node index first
            whole = cand[(free[cand] == size[cand]) & (size[cand] >= per_node) & ~down_node[cand]]
            if healthy is not None:  # stable: the usual order among equally healthy nodes
                whole = whole[np.argsort(healthy[whole], kind="stable")]
            if len(whole) < cfg.nodes:
                return Blocked(i, free.copy())
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
                return Blocked(i, free.copy())
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
