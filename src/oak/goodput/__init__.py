"""Goodput model of Pollux/Sia: throughput, statistical efficiency, best batch search and the cached table."""

from oak.goodput.batch import BatchChoice, best_batch
from oak.goodput.efficiency import efficiency, gain
from oak.goodput.table import GoodputTable
from oak.goodput.throughput import (
    ThroughputParams,
    compute_time,
    iteration_time,
    network_time,
    throughput,
)

__all__ = [
    "BatchChoice",
    "GoodputTable",
    "ThroughputParams",
    "best_batch",
    "compute_time",
    "efficiency",
    "gain",
    "iteration_time",
    "network_time",
    "throughput",
]
