"""GPU nodes and clusters."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from oak.errors import OakInputError


@dataclass(frozen=True)
class Node:
    """One machine: ``gpus`` GPUs of one ``gpu_type`` (a profiled type name such as ``aws``)."""

    node_id: int
    gpu_type: str
    gpus: int


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
        return sum(n.gpus for n in self.nodes)

    def node_of_gpu(self, gpu: int) -> int:
        for i in range(len(self.nodes) - 1, -1, -1):
            if gpu >= self.first_gpu[i]:
                return i
        raise ValueError(f"GPU id {gpu} out of range")


def homogeneous_cluster(gpu_type: str, nodes: int, gpus_per_node: int, name: str = "custom") -> Cluster:
    """``nodes`` identical nodes of ``gpus_per_node`` GPUs each."""
    if nodes <= 0 or gpus_per_node <= 0:
        raise OakInputError(f"cluster: nodes={nodes}, gpus_per_node={gpus_per_node}; expected positive integers")
    return Cluster(tuple(Node(i, gpu_type, gpus_per_node) for i in range(nodes)), name=name)


CLUSTER_PRESETS = {
    "paper-12": "the OAK paper's cluster: 3 nodes x 4 GPUs, profiled type aws (T4)",
}


def cluster_preset(name: str) -> Cluster:
    """A named cluster; see ``CLUSTER_PRESETS``."""
    if name == "paper-12":
        return homogeneous_cluster("aws", 3, 4, name="paper-12")
    raise OakInputError(f"cluster preset {name!r} is unknown; expected one of {sorted(CLUSTER_PRESETS)}")
