"""Domain model: clusters, configurations, jobs, round snapshots and allocations."""

from oak.model.cluster import Cluster, Node, cluster_preset, homogeneous_cluster
from oak.model.config import Configuration, sia_configurations
from oak.model.job import JobSpec
from oak.model.snapshot import Allocation, RoundSnapshot

__all__ = [
    "Allocation",
    "Cluster",
    "Configuration",
    "JobSpec",
    "Node",
    "RoundSnapshot",
    "cluster_preset",
    "homogeneous_cluster",
    "sia_configurations",
]
