"""The nodes of a real cluster as the engine plans them: a run's devices node by node.

A run on one machine owns one node of ``--cpu-slots`` / ``--gpus`` devices. With ``--cluster-from slurm|ray``
the run owns the nodes of the running cluster: each :class:`RuntimeNode` is one of its nodes (SLURM's node
name and ``NodeAddr``; a Ray node's address), holding ``slots`` devices. The engine's
:class:`~oak.model.cluster.Cluster` then has one node per runtime node, its placement is per node, and a
launch tells the backend on which node each rank runs (:func:`hosts_of`). A backend that can list its nodes
and their state declares :class:`NodeListing`: the scheduler then sees a node that goes down (its jobs fail
there, the node's observed failures count for the failure-aware placement, and it holds no devices until it
is back).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from oak.errors import OakInputError
from oak.model.cluster import Cluster, Node

PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class RuntimeNode:
    """One node of a real cluster: the backend's ``name`` for it, the ``addr`` its ranks are reached at (a
    job's ``MASTER_ADDR`` when its rank 0 runs there), its ``slots`` (CPU slots or GPUs of the run's kind)
    and whether it is ``up`` (a node listing's state; a run's node list holds every node, up or not)."""

    name: str
    addr: str
    slots: int
    up: bool = True

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in ",: \t\n"):
            raise OakInputError(f"node name {self.name!r}: expected a name without commas, colons or spaces")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise OakInputError(f"node {self.name!r}: slots={self.slots!r}; expected a positive integer")


class NodeLost(RuntimeError):
    """A launch found a node it was planned on unreachable (a backend's own probe, before the cluster
    noticed): the scheduler holds the node down and plans again; the job is not at fault."""

    def __init__(self, node: str, why: str) -> None:
        super().__init__(f"node {node} is unreachable: {why}")
        self.node = node


def probe(addr: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Whether a node's daemon answers on ``addr:port`` (a TCP connect): None if it does, else why not (a
    killed daemon refuses at once; a node cut off the network does not answer within ``timeout_s``)."""
    try:
        socket.create_connection((addr, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"{addr}:{port}: {exc or type(exc).__name__}"
    return None


@runtime_checkable
class NodeListing(Protocol):
    """A backend that lists its cluster's nodes (a capability: ``--cluster-from`` needs it, and the
    scheduler watches the run's nodes through it)."""

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        """Every node of the cluster that has devices of the run's kind, with its current state (``fresh``:
        ask the cluster now, not a recent listing)."""
        ...


def check_nodes(nodes: Sequence[RuntimeNode]) -> tuple[RuntimeNode, ...]:
    """``nodes`` as a tuple, after checking that it is a usable node list: not empty, names unique."""
    out = tuple(nodes)
    if not out:
        raise OakInputError("the cluster has no node with devices of this kind")
    seen: set[str] = set()
    for n in out:
        if n.name in seen:
            raise OakInputError(f"node {n.name!r} is listed twice")
        seen.add(n.name)
    return out


def take_devices(nodes: Sequence[RuntimeNode], devices: int | None) -> tuple[RuntimeNode, ...]:
    """The nodes a run of ``devices`` devices owns (None: all of them): whole nodes in the cluster's order,
    the last one cut to what is left. More devices than the cluster has is an input error."""
    out = check_nodes(nodes)
    total = sum(n.slots for n in out)
    if devices is None:
        return out
    if devices > total:
        names = ", ".join(f"{n.name} ({n.slots})" for n in out)
        raise OakInputError(f"{devices} devices asked for, but the cluster's nodes hold {total}: {names}")
    taken: list[RuntimeNode] = []
    left = devices
    for n in out:
        if left <= 0:
            break
        k = min(n.slots, left)
        taken.append(RuntimeNode(n.name, n.addr, k, n.up))
        left -= k
    return tuple(taken)


def nodes_cluster(nodes: Sequence[RuntimeNode], gpu_type: str, name: str) -> Cluster:
    """The engine's cluster of a run's nodes: one engine node per runtime node, in order (its global device
    ids are node-major: ``nodes[0]``'s slots first)."""
    return Cluster(tuple(Node(i, gpu_type, n.slots) for i, n in enumerate(nodes)), name=name)


def node_index(nodes: Sequence[RuntimeNode], device: int) -> int:
    """The index in ``nodes`` of the node holding global device id ``device``."""
    first = 0
    for k, n in enumerate(nodes):
        if device < first + n.slots:
            return k
        first += n.slots
    raise OakInputError(f"device {device} is beyond the run's {first} devices")


def hosts_of(nodes: Sequence[RuntimeNode], devices: Sequence[int]) -> tuple[RuntimeNode, ...]:
    """Per device of an incarnation (one rank each), the node it is on."""
    return tuple(nodes[node_index(nodes, int(d))] for d in devices)
