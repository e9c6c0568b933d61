"""Workloads: the paper's five embedded workloads, loaders for OAK and Sia CSV formats, and Philly-derived
workloads (:mod:`oak.workloads.philly`, imported on demand)."""

from oak.workloads.loader import Workload, builtin_workloads, load_workload, read_workload_csv

__all__ = ["Workload", "builtin_workloads", "load_workload", "read_workload_csv"]
