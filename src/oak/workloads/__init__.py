"""Workloads: the paper's five embedded workloads and loaders for OAK and Sia CSV formats."""

from oak.workloads.loader import Workload, builtin_workloads, load_workload, read_workload_csv

__all__ = ["Workload", "builtin_workloads", "load_workload", "read_workload_csv"]
