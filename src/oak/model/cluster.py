"""GPU nodes and clusters."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from oak.errors import OakInputError


@dataclass(frozen=True)
class Node:
    """One machine: ``gpus`` GPUs of one ``gpu_type`` (a profiled type name such as ``aws``)."""

    node_id: int
    gpu_type: str
    gpus: int


@dataclass(frozen=True)
class ClusterArrays:
    """A cluster's layout as read-only arrays (``Cluster.arrays``): each node's first global GPU id and GPU count,
    each GPU's node, and each type's node ids in node order."""

    first_gpu: npt.NDArray[np.int64]
    node_gpus: npt.NDArray[np.int64]
    gpu_node: npt.NDArray[np.int64]
    type_nodes: dict[str, npt.NDArray[np.int64]]


def _frozen(values: list[int]) -> npt.NDArray[np.int64]:
    out = np.asarray(values, dtype=np.int64)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Cluster:
    """A set of nodes. GPU ids are global: node-major, ``first_gpu[node] + local index``."""

    nodes: tuple[Node, ...]
    name: str = "custom"

    def __post_init__(self) -> None:
        if not self.nodes:
            raise OakInputError("cluster: expected at least one node, got none")
        for i, n in enumerate(self.nodes):
            if n.node_id != i:
                raise OakInputError(f"cluster: node {i} has node_id {n.node_id}; expected ids 0..N-1 in order")
            if n.gpus <= 0:
                raise OakInputError(f"cluster: node {i} has {n.gpus} GPUs; expected a positive count")

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU type names in order of first appearance."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            seen.setdefault(n.gpu_type, None)
        return tuple(seen)

    def capacity(self, gpu_type: str) -> int:
        """Total GPUs of one type."""
        return sum(n.gpus for n in self.nodes if n.gpu_type == gpu_type)

    def nodes_of(self, gpu_type: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.gpu_type == gpu_type)

    @cached_property
    def first_gpu(self) -> tuple[int, ...]:
        """Global id of each node's first GPU."""
        out, acc = [], 0
        for n in self.nodes:
            out.append(acc)
            acc += n.gpus
        return tuple(out)

    @property
    def total_gpus(self) -> int:
        return self._total_gpus

    def node_of_gpu(self, gpu: int) -> int:
        """Index of the node holding global GPU id ``gpu`` (binary search: O(log nodes))."""
        if not 0 <= gpu < self.total_gpus:
            raise ValueError(f"GPU id {gpu} out of range [0, {self.total_gpus})")
        return bisect.bisect_right(self.first_gpu, gpu) - 1

    @cached_property
    def gpu_nodes(self) -> tuple[int, ...]:
        """The node index of every global GPU id (a lookup table)."""
        return tuple(k for k, n in enumerate(self.nodes) for _ in range(n.gpus))

    @cached_property
    def nodes_of_type(self) -> dict[str, tuple[Node, ...]]:
        """The nodes of each GPU type, in node order."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            out.setdefault(n.gpu_type, []).append(n)
        return {t: tuple(ns) for t, ns in out.items()}

    @cached_property
    def arrays(self) -> ClusterArrays:
        """The layout as arrays, for vectorised placement."""
        return ClusterArrays(
            first_gpu=_frozen(list(self.first_gpu)),
            node_gpus=_frozen([n.gpus for n in self.nodes]),
            gpu_node=_frozen(list(self.gpu_nodes)),
            type_nodes={t: _frozen([n.node_id for n in ns]) for t, ns in self.nodes_of_type.items()},
        )

    @cached_property
    def _total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def homogeneous_cluster(gpu_type: str, nodes: int, gpus_per_node: int, name: str = "custom") -> Cluster:
    """``nodes`` identical nodes of ``gpus_per_node`` GPUs each."""
    if nodes <= 0 or gpus_per_node <= 0:
        raise OakInputError(f"cluster: nodes={nodes}, gpus_per_node={gpus_per_node}; expected positive integers")
    return Cluster(tuple(Node(i, gpu_type, gpus_per_node) for i in range(nodes)), name=name)


def scale_cluster(cluster: Cluster, k: int) -> Cluster:
    """``cluster`` with every node count multiplied by ``k``: each node is repeated ``k`` times in place, so the
    per-type node counts (and GPUs per type) grow ``k``-fold and types keep their order. Named ``<name>x<k>``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise OakInputError(f"cluster scale {k!r}: expected a positive integer")
    nodes = tuple(Node(i, n.gpu_type, n.gpus) for i, n in enumerate(n for n in cluster.nodes for _ in range(k)))
    return Cluster(nodes, name=f"{cluster.name}x{k}")


def _grouped_cluster(name: str, groups: tuple[tuple[str, int, int], ...]) -> Cluster:
    """A cluster from (gpu_type, nodes, GPUs per node) groups, in order."""
    out: list[Node] = []
    for gpu_type, count, per_node in groups:
        out.extend(Node(len(out), gpu_type, per_node) for _ in range(count))
    return Cluster(tuple(out), name=name)


_BASE_PRESETS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "paper-12": (("aws", 3, 4),),
    "sia-64": (("aws", 6, 4), ("dgx-ext", 2, 8), ("rtx", 3, 8)),
}

#: Preset name -> description. Any preset also takes a scale suffix ``xK`` (K a positive integer): every node
#: count multiplied by K, e.g. ``sia-64x32`` (2,048 GPUs) or ``paper-12x4`` (48 GPUs).
CLUSTER_PRESETS = {
    "paper-12": "the OAK paper's cluster: 3 nodes x 4 GPUs, profiled type aws (T4); 12 GPUs",
    "sia-64": (
        "Sia's heterogeneous cluster: 6 nodes x 4 aws (T4), 2 nodes x 8 dgx-ext (A100), "
        "3 nodes x 8 rtx (2080Ti); 64 GPUs"
    ),
}

#: Largest K accepted in a preset's ``xK`` suffix (guards against typos building millions of nodes).
MAX_PRESET_SCALE = 1024

#: How ``cluster_preset`` reads a scaled name: ``<preset>x<K>``.
_SCALED = re.compile(r"^(?P<base>.+)x(?P<k>[^x]*)$")


def cluster_preset_help() -> str:
    """One line per preset plus the ``xK`` suffix, for command-line help."""
    listed = "; ".join(f"{name}: {desc}" for name, desc in CLUSTER_PRESETS.items())
    return f"{listed}. Append xK (K a positive integer) to multiply every node count by K, e.g. sia-64x32."


def preset_scale(name: str) -> int:
    """The ``xK`` multiplier K of a preset name (1 without a suffix); OakInputError for a bad name."""
    cluster_preset(name)
    m = _SCALED.match(name)
    return 1 if name in _BASE_PRESETS or m is None else int(m.group("k"))


def cluster_preset(name: str) -> Cluster:
    """A named cluster (see ``CLUSTER_PRESETS``), optionally scaled: ``<preset>xK`` multiplies every node count
    by the positive integer K (``sia-64x32`` = 2,048 GPUs). Unknown names and bad K raise OakInputError."""
    expected = f"expected one of {sorted(CLUSTER_PRESETS)}, optionally with a scale suffix xK (e.g. sia-64x32)"
    if name in _BASE_PRESETS:
        return _grouped_cluster(name, _BASE_PRESETS[name])
    m = _SCALED.match(name)
    if m is None or m.group("base") not in _BASE_PRESETS:
        raise OakInputError(f"cluster preset {name!r} is unknown; {expected}")
    raw = m.group("k")
    if not re.fullmatch(r"[0-9]+", raw) or not 1 <= int(raw) <= MAX_PRESET_SCALE:
        raise OakInputError(
            f"cluster preset {name!r}: scale multiplier {raw!r} after 'x'; expected a positive integer K "
            f"<= {MAX_PRESET_SCALE} (e.g. {m.group('base')}x4)"
        )
    return scale_cluster(cluster_preset(m.group("base")), int(raw))
