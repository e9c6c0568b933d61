"""Configurations (GPU type, nodes, GPUs) a job may be given, as Sia defines them (reference §3.4)."""

from __future__ import annotations

from dataclasses import dataclass

from oak.model.cluster import Cluster


@dataclass(frozen=True)
class Configuration:
    """``gpus`` GPUs of ``gpu_type`` on ``nodes`` nodes (multi-node configurations take whole nodes)."""

    gpu_type: str
    nodes: int
    gpus: int

    def __str__(self) -> str:
        return f"{self.gpu_type}:{self.nodes}x{self.gpus // self.nodes}"


def sia_configurations(cluster: Cluster) -> tuple[Configuration, ...]:
    """Sia's set per GPU type with R GPUs per node and n nodes: (1,1),(1,2),(1,4),…,(1,R) ∪ (k,k·R), k=2..n.

    Nodes of one type are assumed to have the same GPU count (the smallest count is used otherwise).
    """
    out: list[Configuration] = []
    for t in cluster.gpu_types:
        nodes = cluster.nodes_of(t)
        per_node = min(n.gpus for n in nodes)
        g = 1
        while g < per_node:
            out.append(Configuration(t, 1, g))
            g *= 2
        out.append(Configuration(t, 1, per_node))
        out.extend(Configuration(t, k, k * per_node) for k in range(2, len(nodes) + 1))
    return tuple(out)
