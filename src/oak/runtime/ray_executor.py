"""The Ray executor of ``oak run --backend ray``: each job incarnation as a placement group of rank actors.

One placement group per incarnation holds one bundle per rank (``{"GPU": 1}`` for ``--gpus``, else
``{"oak_slot": 1}``: a custom resource that stands for a CPU worker slot). A GPU run on a cluster with fewer
``GPU`` resources than asked for is refused; it never falls back to CPU slots. In each bundle a small threaded actor (:class:`_RankActor`) starts the packaged worker,
``python -m oak.runtime.worker ...``, as a child process, exactly as :mod:`oak.runtime.launch` does locally,
so the checkpoint, stop (SIGTERM → checkpoint → exit 0) and status semantics are the same. The child dies
with its actor (``PR_SET_PDEATHSIG``), so killing an actor, or losing its node, kills the rank.

Rendezvous: rank 0's node IP is the master address (``127.0.0.1`` when every rank is on one node); rank 0
binds a port the OS picks there and publishes it in the job directory (``rendezvous.json``, with this
incarnation's token), where the other ranks read it. The job directory is passed as an absolute path: on a multi-node cluster the
run directory must be on a filesystem every node shares (checkpoints, ``status.json``, logs).

Placement groups and rank actors are detached and named (``oak:<run tag>:<job>:<nonce>``, its actors
``...:r<rank>`` in the namespace ``oak``): an incarnation outlives the scheduler that launched it, and a
restarted scheduler of the same run adopts it (:meth:`RayExecutor.adopt`) or removes it.

Every wait is bounded: the reservation (``pg.wait``), actor start, worker start, stop and kill.
:class:`RayBackend` launches, kills (a signal to every rank's worker through its actor; SIGKILL also removes
the actors and the group) and lists (each rank's exit status; a rank whose actor died — ``ray.kill``, a crash,
node loss — has the pseudo status ``_DIED``); :class:`RayExecutor` is the incarnation layer
(:mod:`oak.runtime.incarnations`) over it, so a job is done, stopped or failed by the same rule as on any
backend.

:meth:`RayExecutor.reconcile` compares the scheduler's intended allocation with what Ray runs (this run's
placement groups in ``placement_group_table``, the executor's live rank actors), reports each discrepancy and
removes whatever Ray runs for this run that is not intended.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oak.errors import OakInputError
from oak.runtime.executor import Launch, job_spec
from oak.runtime.incarnations import Incarnations, Ranks
from oak.runtime.launch import prepare_job_dir, rank_commands, spawn_rank
from oak.runtime.nodes import NodeLost, RuntimeNode, probe
from oak.runtime.procs import die_with_parent, write_exit_status

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.placement_group import (
        PlacementGroup,
        placement_group,
        placement_group_table,
        remove_placement_group,
    )
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    _RAY: Any = ray  # untyped parts of Ray's API (cluster_resources, nodes, ...), called through Any
    _RAY_IMPORT_ERROR: ImportError | None = None
except ImportError as _exc:  # pragma: no cover - exercised only without Ray
    _RAY_IMPORT_ERROR = _exc

SLOT_RESOURCE = "oak_slot"
"""Custom Ray resource of one device slot (a CPU worker slot, or a stand-in GPU)."""
GPU_RESOURCE = "GPU"
PG_PREFIX = "oak"
"""Placement groups are named ``oak:<run tag>:<job>:<nonce>`` (the run tag hashes the run directory); the rank
actors in one ``<its name>:r<rank>``, in the namespace ``RAY_NAMESPACE``."""
EXITS_GROUP = "exits"
"""The rank actor's concurrency group of ``wait_exit`` calls: each scheduler that follows an incarnation (its
launcher, then each one that adopts it) blocks one of its threads until the worker exits, and a dead
scheduler's call keeps its thread; ``send``, ``kill_worker`` and ``worker`` run in the default group, so they
are never starved by them."""
EXITS_CONCURRENCY = 64
RAY_NAMESPACE = "oak"
"""Namespace of the rank actors: a restarted scheduler (another Ray job) finds them by name there."""
KILL_WAIT_S = 10.0
"""Bound on waiting for SIGKILLed ranks to be reaped."""
NODE_SHARE = 0.001
"""How much of a node's ``node:<address>`` resource each bundle of a rank planned there asks for."""
_DIED = -(10**6)
"""Pseudo exit code of a rank whose actor died (killed, crashed, node lost)."""


# ---------------------------------------------------------------------------------------------- the actor
class _RankActor:
    """Runs one rank's worker process inside its placement-group bundle (a threaded actor: ``wait_exit``
    blocks one thread while ``send`` and ``kill_worker`` arrive on others)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = threading.Event()
        self._exited = threading.Event()
        self._code: int | None = None
        self._error: str | None = None
        self._group = False

    def node_ip(self) -> str:
        return str(_RAY.util.get_node_ip_address())

    def free_port(self) -> int:
        """A TCP port free a moment ago on this actor's node (a command job's MASTER_PORT)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def start(
        self,
        args: list[str],
        env: dict[str, str],
        log_path: str,
        ray_gpus: bool,
        timeout_s: float,
        command: bool,
        exit_to: tuple[str, int] | None = None,
    ) -> int:
        """Start ``python -m oak.runtime.worker ARGS`` (or, for a command job, the command ``ARGS`` itself,
        whose signals then go to its whole process group) with ``env`` added; returns its pid. ``exit_to``
        (job directory, rank): where to leave the exit status once it exits (``oak.runtime.procs``: what a
        restarted scheduler reads of a command that ended while none ran; the packaged worker leaves its own)."""
        if self._proc is not None or self._error is not None:
            raise RuntimeError("this rank actor already started its worker")
        full_env = dict(os.environ)
        full_env.update(env)
        if ray_gpus:
            full_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in ray.get_gpu_ids())
        self._group = command
        argv = list(args) if command else [sys.executable, "-m", "oak.runtime.worker", *args]
        # The thread that forks the child lives exactly as long as the child: PDEATHSIG follows the thread.
        threading.Thread(target=self._own, args=(argv, full_env, log_path, exit_to), daemon=True).start()
        if not self._started.wait(timeout_s):
            raise RuntimeError(f"the worker did not start within {timeout_s:g} s")
        if self._error is not None or self._proc is None:
            raise RuntimeError(f"cannot start the worker: {self._error}")
        return self._proc.pid

    def _own(self, argv: list[str], env: dict[str, str], log_path: str, exit_to: tuple[str, int] | None) -> None:
        try:
            proc = spawn_rank(
                argv,
                env,
                log_path,
                note=f" (ray actor pid {os.getpid()})",
                preexec_fn=die_with_parent(os.getpid()),  # only prctl in the child
            )
        except BaseException as exc:
            self._error = f"{type(exc).__name__}: {exc}"
            self._code = _DIED
            self._started.set()
            self._exited.set()
            return
        self._proc = proc
        self._started.set()
        code = proc.wait()
        if exit_to is not None:
            with contextlib.suppress(OSError):
                write_exit_status(exit_to[0], exit_to[1], proc.pid, code)
        self._code = code
        self._exited.set()

    def worker(self) -> tuple[int | None, int | None]:
        """Its worker's pid (None if none started) and exit status (None while it runs)."""
        pid = self._proc.pid if self._proc is not None else None
        return pid, (self._code if self._exited.is_set() else None)

    def wait_exit(self) -> int:
        """Block until the worker exits; its exit status (negative: killed by that signal)."""
        self._exited.wait()
        return _DIED if self._code is None else self._code

    def send(self, sig: int) -> None:
        """Signal the worker if it still runs (SIGTERM: checkpoint and exit 0)."""
        if self._proc is not None and not self._exited.is_set():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if self._group:
                    os.killpg(self._proc.pid, sig)
                else:
                    os.kill(self._proc.pid, sig)

    def kill_worker(self, timeout_s: float) -> int | None:
        """SIGKILL the worker and wait up to ``timeout_s`` s for it to be reaped; its exit status."""
        self.send(signal.SIGKILL)
        self._exited.wait(timeout_s)
        return self._code


# ---------------------------------------------------------------------------------------------- the executor
@dataclass
class _Incarnation:
    """One launched incarnation of a job: its placement group, rank actors, worker pids and exit codes."""

    name: str
    job_dir: Path
    pg: Any
    pg_name: str
    actors: list[Any]
    pids: list[int]
    runs: dict[Any, int]  # ObjectRef of wait_exit → rank
    codes: dict[int, int] = field(default_factory=dict)
    released: bool = False


def _check_reachable(address: str, timeout_s: float) -> None:
    """Fail fast on a ``HOST:PORT`` nobody listens on (``ray.init`` would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address or not host:
        return  # "auto", "ray://...": left to ray.init
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise OakInputError(
            f"--address {address}: no Ray head answers there within {timeout_s:g} s ({exc}); start it with "
            "'ray start --head' or fix the address"
        ) from exc


def _addr_key(addr: str) -> tuple[int, str]:
    with contextlib.suppress(ValueError):
        return int(ipaddress.ip_address(addr)), addr
    return -1, addr


def _cuda_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count())


class RayBackend:
    """Runs each job's ranks as Ray actors in one placement group per incarnation (see the module doc): a
    :class:`~oak.runtime.incarnations.Backend` (launch, kill, list) that can adopt.

    ``address``: a running cluster (``HOST:6379``, ``auto``); None starts a local Ray that declares the
    ``devices`` slots (``oak_slot`` for CPU slots; for GPUs the CUDA GPUs this machine shows). ``devices``
    None (``--gpus auto``): every ``GPU`` of the cluster, counted once Ray is up (``self.devices``). A Ray
    already initialised in this process is used as it is (and not shut down). ``wait_timeout_s`` bounds each
    wait for a reservation, an actor or a worker start. ``ray_init_kwargs`` are added to ``ray.init``.
    """

    def __init__(
        self,
        address: str | None,
        device_kind: str,
        devices: int | None,
        *,
        wait_timeout_s: float = 60.0,
        ray_init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if _RAY_IMPORT_ERROR is not None:
            raise OakInputError("--backend ray needs Ray: pip install 'oak-scheduler[ray]'") from _RAY_IMPORT_ERROR
        if device_kind not in ("cpu", "gpu"):
            raise OakInputError(f"device_kind={device_kind!r}: expected 'cpu' or 'gpu'")
        if devices is None and device_kind != "gpu":
            raise OakInputError("devices=None (count the cluster's GPUs) needs device_kind='gpu'")
        if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
            raise OakInputError(f"devices={devices!r}: expected a positive integer")
        if not wait_timeout_s > 0:
            raise OakInputError(f"wait_timeout_s={wait_timeout_s!r}: expected a positive number of seconds")
        self.device_kind: str = device_kind
        self.devices: int = devices if devices is not None else 0
        self.wait_timeout_s = float(wait_timeout_s)
        self._jobs: dict[str, _Incarnation] = {}
        self._tag: str | None = None
        self._swept = False
        self._started_ray = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            else:
                gpus = _cuda_gpus() if device_kind == "gpu" else 0
                kwargs["num_cpus"] = max(1, min(os.cpu_count() or 1, devices or gpus or 1))
                kwargs["num_gpus"] = gpus
                kwargs["object_store_memory"] = 96 * 1024 * 1024
                if device_kind == "cpu":
                    kwargs["resources"] = {SLOT_RESOURCE: self.devices}
            kwargs.update(ray_init_kwargs or {})
            if address:
                _check_reachable(address, min(self.wait_timeout_s, 10.0))
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                hint = ""
                if address and not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
                    hint = (
                        "; if the cluster uses token authentication (ray start turns it on by default since Ray "
                        "2.59), give this process the cluster's RAY_AUTH_MODE=token and its token "
                        "(RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), as on its nodes"
                    )
                raise OakInputError(
                    f"cannot {'connect to Ray at ' + address if address else 'start Ray'}: {exc}{hint}"
                ) from exc
            self._started_ray = True
        try:
            total = _RAY.cluster_resources()
            self._ray_gpus = device_kind == "gpu"
            self.resource = GPU_RESOURCE if self._ray_gpus else SLOT_RESOURCE
            have = float(total.get(self.resource, 0.0))
            if devices is None:
                self.devices = int(have)
            if have < max(1, self.devices):
                how = (
                    "start the nodes with their GPUs visible (ray start --num-gpus N), or run on CPU slots "
                    "with --cpu-slots N"
                    if self._ray_gpus
                    else f"start the nodes with: ray start --resources '{{\"{SLOT_RESOURCE}\": N}}'"
                )
                asked = "--gpus auto" if devices is None else f"the {devices} devices asked for"
                raise OakInputError(f"Ray cluster has {have:g} {self.resource!r} in all, fewer than {asked}; " + how)
        except BaseException:
            self.close()
            raise
        self._actor_cls = _RAY.remote(concurrency_groups={EXITS_GROUP: EXITS_CONCURRENCY})(_RankActor)

    # ------------------------------------------------------------------ launch
    def _bundle(self) -> dict[str, float]:
        return {self.resource: 1.0}

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        """The cluster's nodes with the run's resource (``oak_slot`` or ``GPU``), by address (a node's name
        here: a raylet started again on the same machine is the same node), in address order; up while a
        raylet of it is alive. Ray is asked every time (``fresh`` is implied)."""
        seen: dict[str, RuntimeNode] = {}
        for row in _RAY.nodes():
            addr = str(row.get("NodeManagerAddress", ""))
            count = int(float(row.get("Resources", {}).get(self.resource, 0.0)))
            alive = bool(row.get("Alive"))
            if not addr or (count < 1 and addr not in seen):
                continue
            old = seen.get(addr)
            if old is None or (alive and not old.up):
                seen[addr] = RuntimeNode(addr, addr, max(count, old.slots if old else 1), alive)
        return [seen[a] for a in sorted(seen, key=_addr_key)]

    def _probe_nodes(self, item: Launch) -> None:
        """Each node ``item`` is planned on: alive in Ray's view and its raylet answering (a node killed or cut
        off a moment ago is still alive for Ray until its health checks fail; reserving there would wait in
        vain). Raises :class:`~oak.runtime.nodes.NodeLost` for the first that is not."""
        ports: dict[str, int] = {}
        for row in _RAY.nodes():
            if row.get("Alive"):
                ports[str(row.get("NodeManagerAddress", ""))] = int(row.get("NodeManagerPort", 0) or 0)
        for node in dict.fromkeys(item.hosts):
            if node.addr not in ports:
                raise NodeLost(node.name, "Ray lists no live raylet there")
            why = probe(node.addr, ports[node.addr]) if ports[node.addr] else None
            if why is not None:
                raise NodeLost(node.name, f"its raylet does not answer ({why})")

    def _strategy(self, n: int) -> str:
        """STRICT_PACK when some node can hold all ``n`` bundles, else PACK."""
        best = 0.0
        for node in _RAY.nodes():
            if node.get("Alive"):
                best = max(best, float(node.get("Resources", {}).get(self.resource, 0.0)))
        return "STRICT_PACK" if best >= n else "PACK"

    def _run_tag(self, job_dir: Path) -> str:
        """This run's tag (the run directory RUN_DIR/jobs/NAME hashed), which names its placement groups."""
        if self._tag is None:
            self._tag = hashlib.sha256(str(job_dir.parent.parent).encode()).hexdigest()[:12]
        return self._tag

    def _groups_of(self, job_dir: Path, name: str) -> dict[str, tuple[str, int]]:
        """This run's placement groups of job ``name`` that Ray has not removed: their name → (id, bundles)."""
        prefix = f"{PG_PREFIX}:{self._run_tag(job_dir)}:{name}:"
        return {
            str(info["name"]): (str(pid), len(info.get("bundles", {})))
            for pid, info in placement_group_table().items()
            if str(info.get("name", "")).startswith(prefix) and info.get("state") != "REMOVED"
        }

    def adopt(self, item: Launch, pids: list[int]) -> bool:
        """Follow the incarnation a previous scheduler of this run launched, if it still runs whole: its
        placement group (``oak:<run tag>:<job>:<nonce>``, detached) and one detached rank actor per device,
        named after it, whose workers run with exactly the recorded ``pids``. Any other placement group of this
        job in this run is stale (an incarnation that is not whole, or not the recorded one): its ranks are
        asked to checkpoint and exit, then it is removed (its actors with it)."""
        name = item.job.name
        job_dir = Path(item.job_dir).resolve()
        followed: _Incarnation | None = None
        for pg_name, (pg_id, bundles) in sorted(self._groups_of(job_dir, name).items()):
            if followed is None and bundles == len(item.devices):
                followed = self._follow(item, job_dir, pg_name, pg_id, pids)
                if followed is not None:
                    continue
            self._remove_group(pg_name, pg_id, bundles)
        if followed is None:
            return False
        self._jobs[name] = followed
        return True

    def _follow(self, item: Launch, job_dir: Path, pg_name: str, pg_id: str, pids: list[int]) -> _Incarnation | None:
        """The incarnation of placement group ``pg_name`` if its rank actors are alive and their workers are
        the ``pids`` and still run; None otherwise."""
        try:
            actors = [ray.get_actor(f"{pg_name}:r{r}", namespace=RAY_NAMESPACE) for r in range(len(item.devices))]
            seen = self._get([a.worker.remote() for a in actors], item.job.name, "answer for its rank actors")
        except (ValueError, RuntimeError):  # an actor is gone (killed, its node lost) or does not answer
            return None
        if [pid for pid, _ in seen] != list(pids) or any(code is not None for _, code in seen):
            return None
        pg = PlacementGroup(_RAY.PlacementGroupID.from_hex(pg_id))
        runs = {
            actor.wait_exit.options(concurrency_group=EXITS_GROUP).remote(): rank for rank, actor in enumerate(actors)
        }
        return _Incarnation(item.job.name, job_dir, pg, pg_name, actors, list(pids), runs)

    def _remove_group(self, pg_name: str, pg_id: str, bundles: int) -> None:
        """Remove a stale placement group of this run: SIGTERM to its ranks (a checkpoint, as at any stop),
        at most ``KILL_WAIT_S`` for them to exit, then the group, which kills its actors and what is left."""
        actors: list[Any] = []
        for r in range(bundles):
            with contextlib.suppress(ValueError):
                actors.append(ray.get_actor(f"{pg_name}:r{r}", namespace=RAY_NAMESPACE))
        with contextlib.suppress(RayError):
            for actor in actors:
                actor.send.remote(signal.SIGTERM)
            exits: list[Any] = [actor.wait_exit.options(concurrency_group=EXITS_GROUP).remote() for actor in actors]
            if exits:
                ray.wait(exits, num_returns=len(exits), timeout=KILL_WAIT_S)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(PlacementGroup(_RAY.PlacementGroupID.from_hex(pg_id)))

    def launch(self, item: Launch) -> None:
        name = item.job.name
        old = self._jobs.pop(name, None)
        if old is not None:  # its previous incarnation (ended): what is left of it goes
            self._release(old, hard=True)
        n = len(item.devices)
        if n < 1:
            raise OakInputError(f"job {name!r}: launched on no devices")
        if item.hosts and len(item.hosts) != n:
            raise OakInputError(f"job {name!r}: {len(item.hosts)} rank node(s) for {n} device(s)")
        self._probe_nodes(item)
        # each rank's node as planned: Ray's per-node resource ("node:<address>") in its bundle
        bundles = [{**self._bundle(), f"node:{h.addr}": NODE_SHARE} for h in item.hosts] or [
            self._bundle() for _ in range(n)
        ]
        total = float(_RAY.cluster_resources().get(self.resource, 0.0))
        if n > total:
            raise OakInputError(
                f"job {name!r}: cannot reserve {n} bundle(s) of {self._bundle()}: the Ray cluster has {total:g} "
                f"{self.resource!r} in all"
            )
        job_dir = Path(item.job_dir).resolve()
        job_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self._swept:  # the first launch here: a dead scheduler's groups not adopted would hold devices
            self._swept = True
            tag = self._run_tag(job_dir)
            owned = {rec.pg_name for rec in self._jobs.values() if not rec.released}
            for pid, row in self._run_groups().items():
                pg_name = str(row.get("name", ""))
                if pg_name not in owned and pg_name.startswith(f"{PG_PREFIX}:{tag}:"):
                    self._remove_group(pg_name, pid, len(row.get("bundles", {})))
        for stale, (pg_id, size) in self._groups_of(job_dir, name).items():  # a dead scheduler's, not adopted
            self._remove_group(stale, pg_id, size)
        pg_name = f"{PG_PREFIX}:{self._run_tag(job_dir)}:{name}:{uuid.uuid4().hex[:8]}"
        strategy = "PACK" if item.hosts else self._strategy(n)
        # detached, as its actors: an incarnation outlives its scheduler (a restarted one adopts it, or removes it)
        pg = placement_group(bundles, strategy=strategy, name=pg_name, lifetime="detached")
        rec = _Incarnation(name, job_dir, pg, pg_name, [], [], {})
        try:
            if not pg.wait(self.wait_timeout_s):
                raise RuntimeError(
                    f"job {name!r}: Ray could not reserve {n} bundle(s) of {self._bundle()} ({strategy}) within "
                    f"{self.wait_timeout_s:g} s; available now: {_RAY.available_resources().get(self.resource, 0.0):g} "
                    f"{self.resource!r}"
                )
            self._start_ranks(item, rec)
        except BaseException:
            self._release(rec, hard=True)
            raise
        self._jobs[name] = rec

    def _start_ranks(self, item: Launch, rec: _Incarnation) -> None:
        n = len(item.devices)
        opts: dict[str, Any] = {
            "num_cpus": 0,
            "max_concurrency": 4,
            "max_restarts": 0,
            "lifetime": "detached",
            "namespace": RAY_NAMESPACE,
        }
        if self._ray_gpus:
            opts["num_gpus"] = 1
        else:
            opts["resources"] = {SLOT_RESOURCE: 1}
        for rank in range(n):
            strategy = PlacementGroupSchedulingStrategy(placement_group=rec.pg, placement_group_bundle_index=rank)
            rec.actors.append(
                self._actor_cls.options(  # type: ignore[attr-defined]
                    scheduling_strategy=strategy, name=f"{rec.pg_name}:r{rank}", **opts
                ).remote()
            )
        ips = self._get([a.node_ip.remote() for a in rec.actors], rec.name, "start its rank actors")
        master = "127.0.0.1" if len(set(ips)) == 1 else str(ips[0])
        # rank 0 binds a port the OS picks on its node and publishes it in the (shared) job directory under this
        # token: no port is picked here and bound later, so nothing else can take it in between
        command = item.job.is_command
        prepare_job_dir(rec.job_dir, command)
        port = None
        if command:  # the job contract: the user's command with the contract's environment
            port = int(self._get([rec.actors[0].free_port.remote()], rec.name, "pick a port")[0])
        ranks, _token, _incarnation = rank_commands(
            rec.job_dir,
            job_spec(item.job, item.seed),
            n,
            item.devices,
            job_name=item.job.name,
            device_kind="gpu" if self._ray_gpus else "cpu",
            master_addr=master,
            master_port=port,
            environ={},
            own_device=True,  # each rank's actor sees only its own GPU
        )
        refs = []
        for rank, (actor, rc) in enumerate(zip(rec.actors, ranks, strict=True)):
            args = rc.argv if command else rc.argv[3:]  # the actor runs the packaged worker itself
            log = str(rec.job_dir / f"rank{rank}.log")
            exit_to = (str(rec.job_dir), rank) if command else None
            refs.append(actor.start.remote(args, rc.env, log, self._ray_gpus, self.wait_timeout_s, command, exit_to))
        if command:
            rec.pids = [int(p) for p in self._get(refs, rec.name, "start its command")]
            rec.runs = {
                actor.wait_exit.options(concurrency_group=EXITS_GROUP).remote(): rank
                for rank, actor in enumerate(rec.actors)
            }
            return
        rec.pids = [int(p) for p in self._get(refs, rec.name, "start its workers")]
        rec.runs = {
            actor.wait_exit.options(concurrency_group=EXITS_GROUP).remote(): rank
            for rank, actor in enumerate(rec.actors)
        }

    def _get(self, refs: list[Any], name: str, what: str) -> list[Any]:
        try:
            return list(ray.get(refs, timeout=self.wait_timeout_s))
        except GetTimeoutError as exc:
            raise RuntimeError(f"job {name!r}: Ray did not {what} within {self.wait_timeout_s:g} s") from exc
        except RayError as exc:
            raise RuntimeError(f"job {name!r}: Ray could not {what}: {exc}") from exc

    # ------------------------------------------------------------------ list and kill
    def kill(self, name: str, sig: int) -> None:
        """SIGTERM: every rank's worker, through its actor; SIGKILL: the workers, then the actors and the
        placement group (the incarnation stays listed, with its exit statuses)."""
        rec = self._jobs.get(name)
        if rec is None:
            return
        if sig == signal.SIGKILL:
            self._release(rec, hard=True)
            return
        for actor in rec.actors:
            with contextlib.suppress(RayError):
                actor.send.remote(sig)

    def unreaped(self, name: str) -> list[int]:
        return []  # a rank that outlives its actor dies with it (PR_SET_PDEATHSIG); Ray reaps the actor

    def actors(self, name: str) -> list[Any]:
        """The rank actors of a running job, rank 0 first (for failure injection)."""
        rec = self._jobs.get(name)
        return [] if rec is None or rec.released else list(rec.actors)

    def _release(self, rec: _Incarnation, *, hard: bool) -> None:
        """Kill the workers still running (``hard``), the actors and the placement group (idempotent)."""
        if rec.released:
            return
        if hard and rec.actors and len(rec.codes) < len(rec.actors):
            refs = [a.kill_worker.remote(KILL_WAIT_S) for a in rec.actors]
            with contextlib.suppress(RayError):
                ray.wait(refs, num_returns=len(refs), timeout=KILL_WAIT_S + 2.0)
            self.list()  # their exit statuses, before the actors go
        for actor in rec.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(rec.pg)
        rec.released = True

    def close(self) -> None:
        """Release every incarnation, and the local Ray this backend started."""
        for rec in list(self._jobs.values()):
            self._release(rec, hard=True)
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False

    # ------------------------------------------------------------------ reconcile
    def _run_groups(self) -> dict[str, dict[str, Any]]:
        """This run's placement groups that Ray has not removed, by id."""
        if self._tag is None:
            return {}
        prefix = f"{PG_PREFIX}:{self._tag}:"
        table = placement_group_table()
        return {
            pid: info
            for pid, info in table.items()
            if str(info.get("name", "")).startswith(prefix) and info.get("state") != "REMOVED"
        }

    def group_issues(self, intended: dict[str, tuple[int, ...]], live: set[str]) -> list[str]:
        """Ray's side of a reconciliation: this run's placement groups that no ``live`` incarnation owns are
        removed (left by a lost handle); an intended live job whose group is not ``CREATED`` or whose rank
        actors died is reported."""
        issues: list[str] = []
        groups = self._run_groups()
        owned = {r.pg.id.hex() for n, r in self._jobs.items() if n in live and not r.released}
        for pid, row in sorted(groups.items()):
            if pid in owned:
                continue
            pg_name = str(row.get("name", ""))
            job = pg_name.split(":")[2] if pg_name.count(":") >= 3 else "?"
            issues.append(
                f"{job}: placement group {pg_name} ({row.get('state')}, {len(row.get('bundles', {}))} "
                "bundle(s)) is not this scheduler's: removed"
            )
            with contextlib.suppress(Exception):
                remove_placement_group(PlacementGroup(_RAY.PlacementGroupID.from_hex(pid)))
        listed = self.list()
        for name in sorted(set(intended) & live):
            rec = self._jobs.get(name)
            if rec is None or rec.released or None not in listed[name].codes:
                continue
            info = groups.get(rec.pg.id.hex())
            pg_state = "REMOVED" if info is None else str(info.get("state"))
            if pg_state != "CREATED":
                issues.append(f"{name}: its placement group is {pg_state}")
            died = sorted(r for r, c in rec.codes.items() if c == _DIED)
            if died:
                issues.append(f"{name}: rank actor(s) {died} died")
        return issues

    # (last in the class: its name would hide the builtin in the annotations below it)
    def list(self) -> dict[str, Ranks]:
        """Every job's latest incarnation: its worker pids and the exit statuses of the ranks that ended (a rank
        whose actor died: ``_DIED``), all collected in one wait."""
        pending = {ref: rec for rec in self._jobs.values() for ref, rank in rec.runs.items() if rank not in rec.codes}
        if pending:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            for ref in ready:
                rec = pending[ref]
                try:
                    rec.codes[rec.runs[ref]] = int(ray.get(ref, timeout=self.wait_timeout_s))
                except (RayError, GetTimeoutError):  # actor killed, crashed or its node lost
                    rec.codes[rec.runs[ref]] = _DIED
        return {
            name: Ranks(tuple(rec.pids), tuple(rec.codes.get(rank) for rank in range(len(rec.actors))))
            for name, rec in self._jobs.items()
        }


class RayExecutor(Incarnations):
    """The scheduler's executor on Ray: the incarnation layer over :class:`RayBackend` (arguments as there),
    its reconciliation extended with Ray's placement groups."""

    backend: RayBackend

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(RayBackend(*args, **kwargs), list_ttl_s=0.1)

    @property
    def devices(self) -> int:
        """The devices of the run (``--gpus auto``: the cluster's GPUs, counted once Ray was up)."""
        return self.backend.devices

    def actors(self, name: str) -> list[Any]:
        return self.backend.actors(name) if name in self._live else []

    def nodes(self, *, fresh: bool = False) -> list[RuntimeNode]:
        """See :meth:`RayBackend.nodes` (this makes the executor a :class:`~oak.runtime.nodes.NodeListing`)."""
        return self.backend.nodes(fresh=fresh)

    def reconcile(self, intended: dict[str, tuple[int, ...]]) -> list[str]:
        issues = super().reconcile(intended)
        return issues + self.backend.group_issues(intended, set(self._live))

    def shutdown(self) -> None:
        super().shutdown()
        self.backend.close()
