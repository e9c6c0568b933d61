"""The runtime's backends, one registry: a name → a factory of :class:`~oak.runtime.executor.Executor`.

``oak run`` / ``oak serve --backend NAME`` look their executor up here. A factory gets the device kind, the
devices asked for (None: every GPU the backend has, counted by it), a cluster address and the run directory,
and returns the executor with the devices it owns. Ray and SLURM are imported only when asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from oak.errors import OakInputError
from oak.runtime.executor import Executor, LocalExecutor
from oak.runtime.nodes import NodeListing, RuntimeNode, take_devices


@dataclass(frozen=True)
class BackendRequest:
    """What a backend is asked for: ``kind`` of device, ``devices`` (None: count the backend's GPUs), the
    cluster ``address`` (Ray), the ``run_dir`` (whose tag marks the run's jobs on a shared cluster)."""

    kind: Literal["cpu", "gpu"]
    devices: int | None
    address: str | None
    run_dir: Path
    cluster_nodes: bool = False
    """Plan over the cluster's nodes (``--cluster-from``): the executor's ``nodes()`` lists them, and the
    devices asked for may span several."""


Factory = Callable[[BackendRequest], tuple[Executor, int]]


def _local(req: BackendRequest) -> tuple[Executor, int]:
    if req.cluster_nodes:
        raise OakInputError("--cluster-from reads the nodes of a Ray or SLURM cluster: use it with --backend ray|slurm")
    if req.devices is None:
        raise OakInputError("the local backend needs a device count (--cpu-slots N or --gpus N|auto)")
    return LocalExecutor(req.kind), req.devices


def _ray(req: BackendRequest) -> tuple[Executor, int]:
    from oak.runtime.ray_executor import RayExecutor

    ex = RayExecutor(address=req.address, device_kind=req.kind, devices=req.devices)
    return ex, ex.devices


def _slurm(req: BackendRequest) -> tuple[Executor, int]:
    from oak.runtime.slurm_executor import SlurmExecutor

    # the first launch cancels the SLURM jobs an earlier scheduler of this run directory left and did not adopt
    ex = SlurmExecutor(device_kind=req.kind, devices=req.devices, run_dir=req.run_dir, span_nodes=req.cluster_nodes)
    return ex, ex.devices


BACKENDS: dict[str, Factory] = {"local": _local, "ray": _ray, "slurm": _slurm}
"""Backend name → factory; a new backend is one entry (its executor: launch, adopt, state, kill, ...)."""


def make_executor(name: str, req: BackendRequest) -> tuple[Executor, int]:
    """The executor of backend ``name`` and the devices it owns (an unknown name: ``OakInputError``)."""
    factory = BACKENDS.get(name)
    if factory is None:
        raise OakInputError(f"--backend {name!r}: expected one of {', '.join(BACKENDS)}")
    return factory(req)


def cluster_nodes(executor: Executor, devices: int) -> tuple[RuntimeNode, ...]:
    """The nodes of the executor's cluster that a run of ``devices`` devices owns (``--cluster-from``): whole
    nodes in the cluster's order, the last one cut to what is left; every node, up or not (one that is down
    holds no devices until it is back)."""
    if not isinstance(executor, NodeListing):
        raise OakInputError("--cluster-from: this backend cannot list its cluster's nodes")
    return take_devices(executor.nodes(fresh=True), devices)
